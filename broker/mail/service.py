"""The mail service a core holds: the notifier, and the package's own figures.

Op handlers reach it as ``core.extensions["mail"]``.  Every store job the
mail ops run goes through :meth:`Mail.job`, so ``mail.stats`` can show how
much store work mail causes -- and a test can show that a caller waiting on
its inbox causes none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Final, TypeVar, final

import apsw
import attrs

from broker.mail.budget import MailBudget, MailLimits
from broker.mail.notifier import Notifier

if TYPE_CHECKING:
    from broker.core import BrokerCore

T = TypeVar("T")
#: The key of the service in ``core.extensions``.
EXTENSION: Final = "mail"


@final
@attrs.frozen
class MailStatistics:
    waiting: int
    rings: int
    wakeups: int
    store_jobs: int
    #: Sends refused for being over a domain's budget (none of them reached the store).
    over_budget: int


@final
class Mail:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.notifier = Notifier()
        self.budget = MailBudget(MailLimits.from_table(core.team.mail) if core.team is not None else MailLimits())
        self._jobs = 0

    @classmethod
    def of(cls, core: BrokerCore) -> Mail:
        service: Mail = core.extensions[EXTENSION]
        return service

    async def job(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run one store job (see ``store.owner.StoreOwner.call``)."""
        self._jobs += 1
        return await self.core.store.call(fn)

    def statistics(self) -> MailStatistics:
        bell = self.notifier.statistics()
        return MailStatistics(waiting=bell.waiting, rings=bell.rings, wakeups=bell.wakeups, store_jobs=self._jobs, over_budget=self.budget.refused)
