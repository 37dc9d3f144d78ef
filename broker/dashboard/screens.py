"""The dashboard's one dialog: ask a person to confirm an action (and give a reason or a message)."""

from __future__ import annotations

from typing import Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

FieldNeed = Literal["required", "optional", "none"]


class Ask(ModalScreen["str | None"]):
    """A question, what it will do, an optional text field, and Confirm / Cancel.

    Dismissed with the field's text (``""`` when it was left empty and may
    be) on Confirm or Enter, and with ``None`` on Cancel or Escape.  A
    required field left empty keeps the dialog open and says so.
    """

    DEFAULT_CSS = """
    Ask { align: center middle; }
    Ask > Vertical { width: 84; max-width: 95%; height: auto; border: thick $accent; background: $surface; padding: 1 2; }
    Ask #ask-question { text-style: bold; margin-bottom: 1; }
    Ask #ask-detail { color: $text-muted; margin-bottom: 1; }
    Ask #ask-problem { color: $error; height: auto; }
    Ask Horizontal { height: auto; margin-top: 1; }
    Ask Button { margin-right: 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, detail: str, *, field: str = "reason", need: FieldNeed = "optional", confirm: str = "Confirm") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.field = field
        self.need = need
        self.confirm = confirm

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question), id="ask-question")
            yield Static(Text(self.detail), id="ask-detail")
            if self.need != "none":
                yield Input(placeholder=f"{self.field} ({self.need})", id="ask-field")
            yield Static("", id="ask-problem")
            with Horizontal():
                yield Button(f"{self.confirm} (Enter)", id="ask-yes", variant="warning")
                yield Button("Cancel (Esc)", id="ask-no")

    def on_mount(self) -> None:
        self.query_one("#ask-field" if self.need != "none" else "#ask-yes").focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "ask-yes":
            self._submit()
        else:
            self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._submit()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _submit(self) -> None:
        value = self.query_one("#ask-field", Input).value.strip() if self.need != "none" else ""
        if self.need == "required" and not value:
            self.query_one("#ask-problem", Static).update(Text(f"a {self.field} is required (Esc cancels)"))
            return
        self.dismiss(value)
