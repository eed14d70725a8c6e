"""The numpy level's process mode: N processes started with torchrun's variables form one CPU world
(agmm_world_join), from the launcher's environment and from an explicit unique id. Skipped, loudly,
while this libagmm answers UNSUPPORTED to a join (process worlds are issue 13's)."""
import os
import select
import socket
import subprocess
import sys
import time

import pytest

import agmm
import agmm.numpy as anp

WORKER = os.path.join(os.path.dirname(__file__), "process_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nranks, seed, unique_id=None):
    port = free_port()
    procs = []
    package = os.path.dirname(os.path.dirname(agmm.__file__))
    for rank in range(nranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nranks), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   AGMM_TEST_SEED=str(seed), PYTHONPATH=package)
        if unique_id is not None:
            env["AGMM_TEST_UNIQUE_ID"] = unique_id.hex()
        procs.append(subprocess.Popen([sys.executable, WORKER], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            outputs.append((p.wait(timeout=120), p.stdout.read()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a rank of the process world did not finish within 120 s")
    unsupported = [out for rc, out in outputs if rc == 77]
    if unsupported:
        pytest.skip("SKIPPED LOUDLY: this libagmm cannot join a process world: " + unsupported[0].strip())
    for rank, (rc, out) in enumerate(outputs):
        assert rc == 0 and "OK rank" in out, f"rank {rank} exit {rc}:\n{out}"


@pytest.mark.parametrize("nranks", [2, 3])
def test_process_world_from_the_launchers_variables(nranks, seed):
    launch(nranks, seed)


def test_process_world_from_an_explicit_unique_id(seed):
    try:
        uid = anp.unique_id("cpu")
    except agmm.Unsupported as e:
        pytest.skip(f"SKIPPED LOUDLY: agmm_unique_id_create answers UNSUPPORTED in this libagmm: {e}")
    launch(2, seed, uid)


# Rank 1 forks a child that outlives it (as a data loader's worker would), then dies by SIGKILL.
# The child lets go of the world's descriptors at once (pthread_atfork in libagmm), so rank 0's next
# host collective must find rank 1 gone within a fraction of its 20 s timeout, naming its exit.
FORK_WORKER = r"""
import os, signal, sys, time
import numpy as np
import agmm, agmm.numpy as anp
rank = anp.join(timeout_s=20)
rank.all_reduce_(np.ones(8, np.float32))
if rank.rank == 1:
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
    os.kill(os.getpid(), signal.SIGKILL)
t0 = time.monotonic()
try:
    rank.symm_empty(64, np.float32)   # a host collective: it watches the peers' liveness locks
    print("NO ERROR")
except agmm.Error as e:
    print(f"ERROR after {time.monotonic() - t0:.2f} s: {e}")
sys.stdout.flush()
os._exit(0)
"""


def test_process_world_a_forked_child_does_not_keep_a_dead_rank_alive():
    port = free_port()
    package = os.path.dirname(os.path.dirname(agmm.__file__))
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PYTHONPATH=package)
        procs.append(subprocess.Popen([sys.executable, "-c", FORK_WORKER], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True))
    try:
        out = procs[0].communicate(timeout=60)[0]
        procs[1].wait(timeout=60)
    finally:
        for p in procs:
            p.kill()
            try:
                os.killpg(p.pid, 9)           # the forked child, in rank 1's session
            except ProcessLookupError:
                pass
    assert "ERROR after" in out and "has exited" in out, out
    took = float(out.split("ERROR after ")[1].split(" s")[0])
    assert took < 5, f"rank 0 noticed rank 1's death only after {took} s (its timeout: 20 s):\n{out}"


# Two ranks of a job named by AGMM_JOB_ID, each joining and summing once: the meeting tests below
# start them one at a time around something done to a rank's socket.
JOIN_WORKER = r"""
import sys, time
import numpy as np
import agmm.numpy as anp
t0 = time.monotonic()
rank = anp.join(timeout_s=20)
x = np.full(8, rank.rank + 1, np.float32)
rank.all_reduce_(x)
print(f"joined after {time.monotonic() - t0:.2f} s, sum {x[0]:g}")
sys.stdout.flush()
"""


def fnv1a(text):
    h = 14695981039346656037
    for b in text.encode():
        h = ((h ^ b) * 1099511628211) % (1 << 64)
    return h


class TwoRankJob:
    """A job of two JOIN_WORKER ranks; `address` is rank 1's abstract socket name (as
    src/world/fd_socket.c names it)."""

    def __init__(self, what):
        self.port = free_port()
        self.job = f"{what}-{os.getpid()}-{self.port}"
        self.address = "\0agmm-%016x-1" % fnv1a("AGMM_JOB_ID/" + self.job)
        self.procs = {}

    def start(self, rank):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port), AGMM_JOB_ID=self.job,
                   PYTHONPATH=os.path.dirname(os.path.dirname(agmm.__file__)))
        self.procs[rank] = subprocess.Popen([sys.executable, "-c", JOIN_WORKER], env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True)
        return self.procs[rank]

    def kill(self):
        for p in self.procs.values():
            p.kill()

    def check_joined_quickly(self):
        """Both ranks summed right and joined well within their 20 s timeout."""
        for rank in (0, 1):
            p = self.procs[rank]
            out = p.communicate(timeout=60)[0]
            assert p.returncode == 0 and "sum 3" in out, f"rank {rank}:\n{out}"
            took = float(out.split("joined after ")[1].split(" s")[0])
            assert took < 10, f"rank {rank} took {took} s to join (its timeout: 20 s):\n{out}"


# Anything on the host can connect to a rank's abstract socket. A connection that never speaks
# (made here before the peers arrive) must not hold the meeting: rank 1 drops it after 2 s of
# silence, where it waited for it until its 20 s deadline and then blamed rank 0.
def test_process_world_an_idle_connection_does_not_stall_the_meeting():
    job = TwoRankJob("idle-connection")
    job.start(1)
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for _ in range(500):                      # rank 1 listens once its library is loaded
            try:
                idle.connect(job.address)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.02)
        else:
            pytest.fail(f"rank 1 never listened on @{job.address[1:]}: {job.procs[1].poll()}")
        job.start(0)
        job.check_joined_quickly()
    finally:
        idle.close()
        job.kill()


# A process of the same identity that leaves as the next one meets: rank 0's control segment lands
# on the old rank 1's socket, which closes unread. Rank 0 sends it again until rank 1 has claimed its
# slot (it sent once, and the new rank 1 waited its whole 20 s for it).
def test_process_world_a_control_segment_lost_to_a_closing_socket_is_sent_again():
    job = TwoRankJob("lost-segment")
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(job.address)
    old.listen(4)
    try:
        job.start(0)
        ready, _, _ = select.select([old], [], [], 30)   # rank 0's message waits in the backlog
        assert ready, f"rank 0 never sent its control segment: {job.procs[0].poll()}"
        old.close()                                       # ... and is lost with the socket
        job.start(1)
        job.check_joined_quickly()
    finally:
        old.close()
        job.kill()
