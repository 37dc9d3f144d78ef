"""``conclave dashboard``: the operator's live view of a running team (a Textual terminal UI).

Read it in this order:

* ``tail``    -- agents' output, followed in their log files (no broker needed).
* ``link``    -- the one operator connection to the broker, on a thread of its own.
* ``model``   -- what each pane shows, built from the broker's replies (pure).
* ``screens`` -- the confirmation dialog every action goes through.
* ``app``     -- the Textual app: panes, keys, actions.
* ``cli``     -- the command, and ``--json`` (one snapshot, no terminal UI).

The dashboard is an operator surface on floor 1: it imports only ``broker``
and ``store`` and talks to the features (memory, locks, mail) through the
wire, as any client does.  Textual is imported only when the command runs.
"""
