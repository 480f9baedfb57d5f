#!/usr/bin/env python3
"""The fault for tests/e2e_launch.sh: a real signal to one rank of a run
that `dtrain launch` (pid LAUNCH) watches, once the run's metrics show a
mid-epoch checkpoint at step >= STEP written after RESTARTS restart records
(STEP eN: once the metrics show epoch N's line, for strategies that write
no mid-epoch checkpoint).

  launch_kill.py LAUNCH METRICS local|mpi|child RANK STEP [RESTARTS]

local: the rank is a thread of launch's child (named dtrain-rankR, the
first such thread: the coll thread it starts takes its name too): SIGUSR1
to that thread alone (tgkill). mpi: the rank is the process with
OMPI_COMM_WORLD_RANK=R in its environment and METRICS on its command line:
SIGKILL. child: launch's child itself (every rank of a local run), SIGKILL
(RANK unused). Prints the step of
the checkpoint it waited for; exits 1 if none came within 60 s."""
import ctypes, json, os, signal, sys, time

launch, metrics, mode, rank = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
by_epoch = sys.argv[5].startswith("e")
step = int(sys.argv[5][by_epoch:])
restarts = int(sys.argv[6]) if len(sys.argv) > 6 else 0


def seen():
    """The step of the last mid-epoch checkpoint after `restarts` restarts,
    or -1 (the kill lands soon after one: a restart from mid-epoch)."""
    try:
        lines = open(metrics).read().splitlines()
    except OSError:
        return -1
    got, best = 0, -1
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue  # a line being written
        if d.get("event") == "restart":
            got += 1
        elif by_epoch and d.get("event") == "epoch" and got >= restarts:
            best = d["epoch"]
        elif not by_epoch and d.get("event") == "checkpoint" and d.get("epoch_samples") and got >= restarts:
            best = d["step"]
    return best


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        for c in children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def rank_threads(p):
    out = []
    try:
        for t in os.listdir(f"/proc/{p}/task"):
            try:
                if open(f"/proc/{p}/task/{t}/comm").read().strip() == f"dtrain-rank{rank}":
                    out.append(int(t))
            except OSError:
                pass  # a thread that ended
    except OSError:
        pass  # a process that ended
    return sorted(out)


libc = ctypes.CDLL(None, use_errno=True)
target = None  # (pid, tid) of the rank's thread, found while waiting


def find_local():
    for p in descendants(int(launch)):
        tids = rank_threads(p)
        if tids:
            return (p, tids[0])
    return None


def kill_local():
    global target
    if target and libc.tgkill(target[0], target[1], signal.SIGUSR1) == 0:
        return True
    target = find_local()  # gone (a restart): found again
    return bool(target) and libc.tgkill(target[0], target[1], signal.SIGUSR1) == 0


def kill_mpi():
    # every process: on the namespace cluster the ranks are the children of
    # daemons the rsh agent started, not launch's; the metrics path on
    # their command line makes them this run's
    for p in (int(q) for q in os.listdir("/proc") if q.isdigit()):
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and metrics.encode() in cmd:
            try:
                os.kill(p, signal.SIGKILL)
                return True
            except OSError:
                return False
    return False


def kill_child():
    kids = children(int(launch))
    for p in kids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            return False
    return bool(kids)


kill = {"local": kill_local, "mpi": kill_mpi, "child": kill_child}[mode]
try:
    os.nice(-15)  # react within a step on a loaded machine (root; else as it is)
except OSError:
    pass
deadline = time.time() + 60
while time.time() < deadline:
    if mode == "local" and (not target or not os.path.exists(f"/proc/{target[0]}/task/{target[1]}")):
        target = find_local()
    s = seen()
    if s >= step and kill():
        print(s)
        sys.exit(0)
    time.sleep(0.002)
sys.exit(1)
