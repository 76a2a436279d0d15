#!/usr/bin/env python3
"""What one `inbox` process costs, next to the cost of starting any process.

Runs each command N times as a fresh process against a fresh database and
prints the median and p99 wall time, and each median as a multiple of
/bin/true's. Usage: scripts/cli-cost.py [N] [--durability full]
(installs the release binaries first, as users do: scripts/install). This is a quick check; the benchmark
harness of issue 4 is the reference for comparisons with other systems.
"""
import os, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 300
DURABILITY = "full" if "--durability" in sys.argv and "full" in sys.argv else "normal"

INSTALLED = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "installed")
subprocess.run([os.path.join(ROOT, "scripts", "install"), "--root", INSTALLED, "--bin", "inbox",
                "--force", "--no-track", "--quiet"], cwd=ROOT, check=True)
INBOX = os.path.join(INSTALLED, "bin", "inbox")
work = tempfile.mkdtemp(prefix="inbox-cost-")
env = dict(os.environ, INBOX_DB=os.path.join(work, "coord.db"), INBOX_AGENT="worker")
env.pop("INBOX_NOW", None)
subprocess.run([INBOX, "init", "--durability", DURABILITY], env=env, check=True, stdout=subprocess.DEVNULL)

def run(cmd):
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000, done

def measure(cmd_for):
    times = []
    for i in range(N):
        ms, _ = run(cmd_for(i))
        times.append(ms)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]

import json
threads = []
def send(i):
    return [INBOX, "send", "--from", "lead", "--to", "worker", "--subject", f"task {i}", "--json"]
def claim(i):
    return [INBOX, "claim", "--thread", threads[i], "--json"]
def done(i):
    return [INBOX, "done", "--thread", threads[i], "--summary", "ok", "--json"]

rows = [("/bin/true", measure(lambda i: ["/bin/true"])),
        ("inbox --version", measure(lambda i: [INBOX, "--version"])),
        ("inbox send", measure(send))]
out = subprocess.run([INBOX, "list", "--limit", "1000", "--json"], env=env, stdout=subprocess.PIPE, check=True)
threads = [t["thread_id"] for t in json.loads(out.stdout)["threads"]][:N]
rows += [("inbox fetch", measure(lambda i: [INBOX, "fetch", "--limit", "5", "--json"])),
         ("inbox claim", measure(claim)),
         ("inbox done", measure(done))]
floor = rows[0][1][0]
print(f"{N} runs each, durability {DURABILITY}, {os.cpu_count()} CPUs")
print(f"{'command':<18}{'median ms':>10}{'p99 ms':>9}{'x /bin/true':>13}")
for name, (median, p99) in rows:
    print(f"{name:<18}{median:>10.2f}{p99:>9.2f}{median / floor:>13.1f}")
wal = os.path.join(work, "coord.db-wal")
print(f"WAL after the run: {os.path.getsize(wal) // 1024 if os.path.exists(wal) else 0} KiB")
shutil.rmtree(work)
