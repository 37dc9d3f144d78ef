"""``conclave mcp``: the agent operations as MCP tools, over stdio.

A coding agent (Claude Code, Codex, ...) starts this server as a child
process.  The server is then part of the agent's process tree and presents
the ticket the agent inherited, so the broker -- which checks the peer's
process ancestry, not anything the model says -- sees exactly that agent's
principal.  No tool takes an identity argument, and a call that carries one
anyway is passed to the broker *unchanged* so the broker's wire layer
refuses it and records the attempt against the agent that made it.  Any
other argument outside a tool's schema is refused here and never sent.

Results are text only (no ``structuredContent``): what the text says --
the reference-material header on memory, the tier badges, the fenced mail --
is exactly what the model reads, whichever client runs it.

The server runs on trio (the MCP SDK is written against anyio, which runs
on trio), the same event loop as the rest of conclave.
"""

from __future__ import annotations

import sys
from typing import Any, Final, final

from broker.client import TrioClient
from agents.mcp_tools import BY_NAME, REFERENCE, TIERS, TOOLS, ToolSpec, render
from broker.errors import ConclaveError, ErrorCode
from broker.wire import IDENTITY_FIELDS

SERVER_NAME: Final = "conclave"
INSTRUCTIONS: Final = (
    "conclave coordinates several agents on one git repository. Take an exclusive lock (lock_acquire) on "
    "every path before you edit it and release it when done; remember what you learn (memory_remember) and "
    "corroborate claims you have checked yourself. " + TIERS + REFERENCE
)


@final
class BrokerLink:
    """The server's connections to the broker, every one of them as the same agent.

    Tool calls may run concurrently (a ``msg_inbox`` that waits must not hold
    up a ``lock_acquire``), and one connection carries one request at a time,
    so each call borrows an idle connection or opens another.  A connection
    whose call was interrupted is closed, never reused: its reply may still
    be on the way.
    """

    def __init__(self) -> None:
        self._idle: list[TrioClient] = []
        self.identity: dict[str, Any] = {}

    async def open(self) -> dict[str, Any]:
        """Authenticate once, so a server without a valid identity fails before it serves."""
        client = await TrioClient.connect_agent()
        self.identity = client.identity
        self._idle.append(client)
        return self.identity

    async def call(self, op: str, args: dict[str, Any]) -> Any:
        client = self._idle.pop() if self._idle else await TrioClient.connect_agent()
        try:
            result = await client.call(op, args)
        except ConclaveError as exc:
            if exc.code is ErrorCode.UNAVAILABLE:
                await _close_quietly(client)
            else:
                self._idle.append(client)
            raise
        except BaseException:
            await _close_quietly(client)
            raise
        self._idle.append(client)
        return result

    async def aclose(self) -> None:
        while self._idle:
            await _close_quietly(self._idle.pop())


async def _close_quietly(client: TrioClient) -> None:
    import trio

    with trio.CancelScope(shield=True):
        try:
            await client.aclose()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass


@final
class ToolRouter:
    """Turns one MCP ``tools/call`` into one broker op, or a refusal."""

    def __init__(self, link: BrokerLink, available_ops: set[str]) -> None:
        self.link = link
        self.tools = tuple(t for t in TOOLS if t.op in available_ops)
        self._validators = {t.name: _validator(t) for t in self.tools}

    async def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[bool, str]:
        """``(ok, text)`` for one tool call: the text is all the model will see."""
        tool = next((t for t in self.tools if t.name == name), None)
        if tool is None:
            known = ", ".join(t.name for t in self.tools)
            return _refusal(ErrorCode.UNKNOWN_OP, f"no tool {name!r} here; the tools are: {known}")
        args = dict(arguments or {})
        if any(key in IDENTITY_FIELDS for key in args):
            # The broker is the one authority on identity fields: it refuses the
            # request and logs the attempt against this agent's principal.
            return await self._forward(tool, args)
        problems = sorted(self._validators[name].iter_errors(args), key=lambda e: [str(p) for p in e.path])
        if problems:
            detail = "; ".join(_describe(p) for p in problems[:5])
            return _refusal(ErrorCode.INVALID_ARGS, f"{name}: {detail}")
        return await self._forward(tool, args)

    async def _forward(self, tool: ToolSpec, args: dict[str, Any]) -> tuple[bool, str]:
        try:
            result = await self.link.call(tool.op, args)
        except ConclaveError as exc:
            return _refusal(exc.code, exc.message)
        return True, render(tool, result)


def _refusal(code: ErrorCode, message: str) -> tuple[bool, str]:
    return False, f"refused [{code.value}]: {message}"


def _validator(tool: ToolSpec) -> Any:
    from jsonschema.validators import validator_for

    schema = tool.input_schema()
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _describe(error: Any) -> str:
    where = ".".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else error.message


def build_server(router: ToolRouter) -> Any:
    """The MCP SDK's low-level server, wired to ``router``."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=t.input_schema(),
                    annotations=types.ToolAnnotations(read_only_hint=t.read_only, open_world_hint=False),
                )
                for t in router.tools
            ]
        )

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        ok, text = await router.call(params.name, params.arguments)
        # Text only, never structuredContent: Claude Code and Codex hand the model the
        # structured JSON *instead of* the text when both are present, which would drop
        # the reference-material header, the tier badges and the mail fences.
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not ok)

    return Server(SERVER_NAME, version=_version(), instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("conclave")
    except PackageNotFoundError:
        return "0"


async def serve() -> None:
    """Authenticate as this process's agent, then serve MCP on stdin/stdout until the client leaves.

    Raises:
        NoIdentityError: no broker-issued ticket in the environment.
        ConclaveError: the broker refused the ticket (``auth_failed``, ``revoked``).
        BrokerUnavailable: no broker listens on the socket.
    """
    link = BrokerLink()
    try:
        me = await link.open()
        # The SDK (over a second of CPU to import: its pydantic models) only once the broker has said yes:
        # a process with no identity, or a refused one, ends without it.
        import sniffio
        from mcp.server.stdio import stdio_server

        ops = {row["op"] for row in await link.call("ops", {})}
        router = ToolRouter(link, ops)
        server = build_server(router)
        loop = sniffio.current_async_library()
        sys.stderr.write(f"conclave mcp: serving {len(router.tools)} tool(s) as {me['agent']}:{me['session']} on {loop}\n")
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await link.aclose()


def describe_tools(available_ops: set[str] | None = None) -> list[dict[str, Any]]:
    """The tool table as JSON (for ``conclave mcp --list-tools`` and the docs)."""
    return [
        {"name": t.name, "op": t.op, "input_schema": t.input_schema(), "description": t.description}
        for t in TOOLS
        if available_ops is None or t.op in available_ops
    ]


__all__ = ["BY_NAME", "BrokerLink", "ToolRouter", "build_server", "describe_tools", "serve"]
