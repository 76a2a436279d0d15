#!/usr/bin/env python3
"""`inbox mcp` driven by the official Python MCP SDK (the `mcp` package), as
an agent runtime written in Python would drive it: the server runs as a
child process over stdio, other agents use the `inbox` CLI as separate
processes on the same database, everything on the real clock.

Usage: cli/tests/mcp_client.py PATH/TO/inbox (scripts/test passes the debug
build; `inbox-mcp` must sit beside it). Prints one line per test and a
closing `N passed, N failed`; exits 1 if any failed.
"""

import asyncio
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

INBOX = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "inbox"


def clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("INBOX_DB", "INBOX_AGENT", "INBOX_NOW")}
    env["NO_COLOR"] = "1"
    return env


def cli(folder, *args, status=0):
    """`inbox ARGS --json` in `folder`, as another process."""
    done = subprocess.run([INBOX, *args, "--json"], cwd=folder, env=clean_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert done.returncode == status, f"inbox {args}: exit {done.returncode}: {done.stdout} {done.stderr}"
    return json.loads(done.stdout)


def project():
    folder = tempfile.mkdtemp(prefix="inbox-mcp-py-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    cli(folder, "init")
    return folder


class Server:
    """`inbox mcp --agent AGENT` in `folder`, connected with a ClientSession."""

    def __init__(self, folder, agent):
        self.params = StdioServerParameters(command=INBOX, args=["mcp", "--agent", agent],
                                            cwd=folder, env=clean_env())

    async def __aenter__(self):
        self.errlog = open(os.devnull, "w")
        self.transport = stdio_client(self.params, errlog=self.errlog)
        read, write = await self.transport.__aenter__()
        self.session = ClientSession(read, write)
        await self.session.__aenter__()
        self.info = await self.session.initialize()
        return self

    async def __aexit__(self, *exc):
        await self.session.__aexit__(*exc)
        await self.transport.__aexit__(*exc)
        self.errlog.close()

    async def call(self, tool, arguments=None, **options):
        """(is_error, JSON of the text) of one tools/call."""
        result = await self.session.call_tool(tool, arguments or {}, **options)
        return bool(result.is_error), json.loads(result.content[0].text)


async def test_tools_are_listed_with_schemas_that_leave_out_the_agent():
    folder = project()
    async with Server(folder, "worker") as server:
        assert server.info.server_info.name == "inbox", server.info
        tools = (await server.session.list_tools()).tools
        names = {tool.name for tool in tools}
        for expected in ("fetch", "claim", "update", "wait_reply", "done", "fail", "reply", "watch",
                         "orch_wait", "send_message", "read_messages", "mark_read", "agent_list"):
            assert expected in names, (expected, names)
        for hidden in ("init", "sweep", "version", "send"):
            assert hidden not in names, (hidden, names)
        for tool in tools:
            properties = tool.input_schema.get("properties", {})
            assert "from_agent" not in properties, tool.name
            if tool.name != "orch_run_list":
                assert "agent" not in properties, tool.name
        wait = next(tool for tool in tools if tool.name == "wait_reply")
        assert wait.input_schema["properties"]["timeout_seconds"]["maximum"] == 50


async def test_send_fetch_claim_and_done_through_tools():
    folder = project()
    async with Server(folder, "lead") as lead, Server(folder, "worker") as worker:
        error, sent = await lead.call("send_message", {"type": "task-assigned", "to": "worker",
                                                       "subject": "Add login", "body": "Email."})
        assert not error and sent["command"] == "send", sent
        thread = sent["thread"]["thread_id"]
        error, fetched = await worker.call("fetch")
        assert not error and fetched["threads"][0]["thread_id"] == thread, fetched
        error, claimed = await worker.call("claim", {"next": True})
        assert not error and claimed["lease"]["agent"] == "worker", claimed
        token = claimed["lease"]["lease_token"]
        error, done = await worker.call("done", {"thread_id": thread, "lease_token": token,
                                                 "summary": "Login shipped"})
        assert not error and done["thread"]["status"] == "done", done
        error, shown = await worker.call("show", {"thread_id": thread})
        assert shown == cli(folder, "show", "--agent", "worker", "--thread", thread), shown


async def test_the_mailbox_with_the_seed_s_arguments():
    folder = project()
    async with Server(folder, "lead") as lead, Server(folder, "worker") as worker:
        for subject in ("First", "Second"):
            error, sent = await lead.call("send_message", {"type": "question", "to": "worker",
                                                           "subject": subject, "body": "?"})
            assert not error, sent
        error, read = await worker.call("read_messages", {"unreadOnly": True})
        assert not error and [m["summary"] for m in read["messages"]] == ["First", "Second"], read
        error, marked = await worker.call("mark_read", {"messageIds": [read["messages"][0]["message_id"]]})
        assert not error, marked
        _, read = await worker.call("read_messages")
        assert [m["summary"] for m in read["messages"]] == ["Second"], read
        error, marked = await worker.call("mark_read", {"all": True})
        assert not error, marked
        _, read = await worker.call("read_messages")
        assert read["messages"] == [], read


async def test_wait_reply_is_woken_by_a_cli_reply():
    folder = project()
    thread = cli(folder, "send", "--from", "lead", "--to", "worker", "--subject", "Add login")["thread"]["thread_id"]
    async with Server(folder, "worker") as worker:
        _, claimed = await worker.call("claim", {"thread_id": thread})
        token = claimed["lease"]["lease_token"]
        await worker.call("update", {"thread_id": thread, "lease_token": token, "status": "blocked",
                                     "summary": "Email or SSO?"})
        progress = []

        async def on_progress(done, total, message):
            progress.append((done, total, message))

        waiting = asyncio.create_task(worker.call("wait_reply", {"thread_id": thread, "lease_token": token},
                                                  progress_callback=on_progress))
        await asyncio.sleep(6)
        assert not waiting.done(), "wait_reply answered before any reply"
        await asyncio.to_thread(cli, folder, "reply", "--from", "lead", "--thread", thread, "--summary", "Email")
        replied = time.monotonic()
        error, woke = await asyncio.wait_for(waiting, 20)
        assert time.monotonic() - replied < 5
        assert not error and woke["woke"] is True and woke["message"]["summary"] == "Email", woke
        assert progress and all(total == 50 for _, total, _ in progress), progress


async def test_a_cancelled_wait_stops_and_the_server_serves_the_next_call():
    folder = project()
    thread = cli(folder, "send", "--from", "lead", "--to", "worker", "--subject", "Add login")["thread"]["thread_id"]
    async with Server(folder, "worker") as worker:
        _, claimed = await worker.call("claim", {"thread_id": thread, "lease_seconds": 3})
        token = claimed["lease"]["lease_token"]
        try:
            # The SDK gives up after 1.5 s and sends notifications/cancelled.
            await worker.call("wait_reply", {"thread_id": thread, "lease_token": token}, read_timeout_seconds=1.5)
            raise AssertionError("wait_reply answered instead of timing out")
        except MCPError:
            pass
        asked = time.monotonic()
        error, listed = await worker.call("list")
        assert not error and time.monotonic() - asked < 5, listed
        # A wait still running would keep renewing the 3 s lease.
        await asyncio.sleep(5)
        shown = cli(folder, "show", "--thread", thread)
        assert shown["thread"]["lease"] is None and shown["thread"]["status"] == "pending", shown


async def test_bad_arguments_are_tool_errors_and_change_nothing():
    folder = project()
    thread = cli(folder, "send", "--from", "lead", "--to", "worker", "--subject", "Add login")["thread"]["thread_id"]
    before = cli(folder, "show", "--thread", thread)
    async with Server(folder, "worker") as worker:
        error, refused = await worker.call("claim", {"thread_id": thread, "lease_seconds": "long"})
        assert error and refused["ok"] is False and refused["error"]["code"] == "invalid_request", refused
        error, refused = await worker.call("claim", {"thread_id": thread, "agent": "lead"})
        assert error and refused["error"]["code"] == "invalid_value", refused
        error, refused = await worker.call("send_message", {"type": "task-done", "to": "lead", "body": "x"})
        assert error and refused["error"]["code"] == "missing_field", refused
    assert cli(folder, "show", "--thread", thread) == before


WAITS_AT_ONCE = 16  # mcp/src/guidance.rs; the refusal's data names it too
LIMIT_REACHED = -32050


async def test_waits_past_the_cap_are_refused_while_reads_answer():
    folder = project()
    async with Server(folder, "lead") as lead:
        extra = 2
        waits = [asyncio.create_task(lead.call("watch", {"timeout_seconds": 30}))
                 for _ in range(WAITS_AT_ONCE + extra)]
        refused = []
        deadline = time.monotonic() + 20
        while len(refused) < extra:
            assert time.monotonic() < deadline, f"{len(refused)} waits refused, not {extra}"
            await asyncio.sleep(0.05)
            for wait in waits:
                if wait.done():
                    error = wait.exception()
                    assert isinstance(error, MCPError), f"a wait answered early: {wait.result()}"
                    refused.append(error)
            waits = [wait for wait in waits if not wait.done()]
        assert len(waits) == WAITS_AT_ONCE
        for error in refused:
            assert error.code == LIMIT_REACHED and "cancel one" in error.message, error
            assert error.data == {"waits_at_once": WAITS_AT_ONCE}, error.data
        asked = time.monotonic()
        error, listed = await lead.call("list")
        assert not error and time.monotonic() - asked < 10, listed
        assert not any(wait.done() for wait in waits)
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def test_an_unknown_tool_is_invalid_params():
    folder = project()
    async with Server(folder, "worker") as worker:
        try:
            await worker.call("launch_rockets")
            raise AssertionError("an unknown tool was answered")
        except MCPError as error:
            assert error.code == -32602 and "launch_rockets" in error.message, error
        error, listed = await worker.call("list")
        assert not error, listed


async def main():
    tests = [value for name, value in globals().items() if name.startswith("test_")]
    passed = failed = 0
    for test in tests:
        try:
            await asyncio.wait_for(test(), 120)
            passed += 1
            print(f"ok: {test.__name__}")
        except Exception:
            failed += 1
            print(f"FAILED: {test.__name__}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
