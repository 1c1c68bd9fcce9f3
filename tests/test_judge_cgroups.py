"""cgroup v2, the TPU VM's platform, two ways: the kernel's own v2 files (cgroup.procs, cpu.stat,
cgroup.kill) on a real v2 mount where we may write one, and the limits (memory.max, pids.max,
memory.events) against a fake cgroupfs tree where the kernel gives v2 no controllers (here: a
hybrid host whose memory and pids sit on v1 hierarchies)."""

import os
import time

import pytest

from microcoder_jax.judge import cgroups

# A new group's files: what is only read, with the kernel's first contents; the knobs the judge
# writes, empty (a plain file is not truncated by a write, a kernel knob is replaced whole).
INTERFACE = {
    "cgroup.procs": "",
    "cgroup.controllers": "",
    "cgroup.subtree_control": "",
    "cgroup.events": "populated 0\nfrozen 0\n",
    "cgroup.kill": "",
    "memory.max": "",
    "memory.swap.max": "",
    "memory.oom.group": "",
    "pids.max": "",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
    "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
}


def _real_v2_mount():
    for point, kind, _ in cgroups._cgroup_mounts():
        if kind == "cgroup2" and os.access(point, os.W_OK):
            return point
    return None


def test_v2_procs_cpu_stat_and_kill_on_the_real_kernel():
    root = _real_v2_mount()
    if root is None or os.geteuid() != 0:
        pytest.skip("no writable cgroup2 mount")
    group = os.path.join(root, f"mcj-test-{os.getpid()}")
    os.mkdir(group)
    try:
        h = cgroups._hierarchy(group, True, [])  # no controllers needed for these files
        groups = {"version": 2, "controllers": [], "dirs": [group], "hierarchies": [h]}
        procs = cgroups.start_test(groups, 256 << 20, 16)
        pid = os.fork()
        if pid == 0:  # joins, leaves a sleeper behind, spins 0.2 s of CPU, exits
            cgroups.join(procs)
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            t = time.process_time()
            while time.process_time() - t < 0.2:
                pass
            os._exit(0)
        for fd in procs:
            os.close(fd)
        os.waitpid(pid, 0)
        with open(os.path.join(group, "t", "cgroup.procs")) as f:
            left = [int(p) for p in f.read().split()]
        assert len(left) == 1  # the sleeper, counted in the test's group
        assert cgroups.cpu_seconds(groups) >= 0.15  # cpu.stat counted the child's CPU
        cgroups.finish_test(groups)  # cgroup.kill, then rmdir
        assert not os.path.exists(os.path.join(group, "t"))
        for _ in range(200):
            try:
                os.kill(left[0], 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the sleeper outlived cgroup.kill")
        cgroups.close_groups(groups)
        assert not os.path.exists(group)
    finally:
        if os.path.exists(group):
            os.rmdir(group)


class _FakeOs:
    """os, except that mkdir under the fake cgroupfs makes a group's interface files and rmdir
    removes them, as the kernel does."""

    def __init__(self, root: str):
        self._root = root

    def __getattr__(self, name):
        return getattr(os, name)

    def _path(self, path, dir_fd):
        return path if dir_fd is None else os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)

    def mkdir(self, path, mode=0o777, *, dir_fd=None):
        full = self._path(path, dir_fd)
        os.mkdir(full, mode)
        if full.startswith(self._root):
            for name, text in INTERFACE.items():
                with open(os.path.join(full, name), "w") as f:
                    f.write(text)

    def rmdir(self, path, *, dir_fd=None):
        full = self._path(path, dir_fd)
        if full.startswith(self._root) and os.path.isdir(full):
            for name in INTERFACE:
                if os.path.exists(os.path.join(full, name)):
                    os.unlink(os.path.join(full, name))
        os.rmdir(full)


def test_v2_limits_oom_and_removal_on_a_fake_tree(tmp_path, monkeypatch):
    root = str(tmp_path / "cgroup")
    fake = _FakeOs(root)
    fake.mkdir(root)
    with open(os.path.join(root, "cgroup.controllers"), "w") as f:
        f.write("cpuset cpu io memory hugetlb pids rdma misc\n")
    monkeypatch.setattr(cgroups, "os", fake)
    monkeypatch.setattr(cgroups, "_cgroup_mounts", lambda: [(root, "cgroup2", [])])
    monkeypatch.setattr(cgroups, "_own_group", lambda controllers: "/")
    groups = cgroups.open_groups("mcj-judge-1")
    assert groups["version"] == 2 and groups["controllers"] == ["cpu", "memory", "pids"]
    parent = os.path.join(root, "mcj-judge-1")
    assert open(os.path.join(parent, "cgroup.subtree_control")).read() == "+memory +pids"
    procs = cgroups.start_test(groups, 256 << 20, 32)
    test = os.path.join(parent, "t")
    read = lambda name: open(os.path.join(test, name)).read()  # noqa: E731
    assert (read("memory.max"), read("memory.swap.max"), read("memory.oom.group"), read("pids.max")) == (
        str(256 << 20),
        "0",
        "1",
        "32",
    )
    for fd in procs:
        os.close(fd)
    with open(os.path.join(test, "cpu.stat"), "w") as f:  # what the kernel would have counted
        f.write("usage_usec 1500000\nuser_usec 1400000\nsystem_usec 100000\n")
    with open(os.path.join(test, "memory.events"), "w") as f:
        f.write("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroups.cpu_seconds(groups) == 1.5
    killed = []
    real_set = cgroups._set
    monkeypatch.setattr(
        cgroups,
        "_set",
        lambda fd, name, value, optional=False: (killed.append((name, value)), real_set(fd, name, value, optional))[1],
    )
    measured = cgroups.finish_test(groups)
    assert measured == {"cpu": 1.5, "oom": True}
    assert ("cgroup.kill", 1) in killed  # the whole group killed at once
    assert not os.path.exists(test)
    cgroups.close_groups(groups)
    assert not os.path.exists(parent)
