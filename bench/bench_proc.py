"""Process accounting for the benchmark: peak RSS and CPU seconds of every
process a contender runs, and a watchdog that stops a run whose processes
together hold more memory than the machine can spare.

Sources of the figures, in order of preference:
  * os.wait4() of a child the harness started itself: ru_maxrss (the
    kernel's peak RSS, KiB) and ru_utime + ru_stime, exact;
  * a process's own report (the DataLoader workers write VmHWM and their
    getrusage() when their iterator ends, see loader_run.py);
  * the Sampler below, which polls /proc every POLL_S seconds and keeps the
    highest VmHWM and CPU it saw per pid: a fallback for processes that
    neither the harness waits for nor report themselves.

Linux only (reads /proc). Used from the harness's main thread plus the one
sampler thread; Sampler's results are read after stop().
"""

import os
import resource
import signal
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.1


def read_status(pid):
    """{"VmHWM": KiB, "VmRSS": KiB, "Name": str} of a live pid, or None."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS"):
                    out[k] = int(v.split()[0])
                elif k == "Name":
                    out[k] = v.strip()
    except (OSError, ValueError, IndexError):
        return None
    return out


def _stat_fields(pid):
    """Fields of /proc/PID/stat after the command name, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces.
    return data[data.rfind(")") + 2:].split()


def cpu_seconds(pid):
    """utime + stime of a live pid in seconds, or None."""
    f = _stat_fields(pid)
    if f is None:
        return None
    # After the name: state(0) ppid(1) ... utime(11) stime(12).
    return (int(f[11]) + int(f[12])) / CLK_TCK


def _children_map():
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        f = _stat_fields(int(name))
        if f is None:
            continue
        kids.setdefault(int(f[1]), []).append(int(name))
    return kids


def descendants(roots):
    """The given pids and all their live descendants."""
    kids = _children_map()
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(kids.get(p, ()))
    return seen


def wait_rusage(proc, timeout=None, on_timeout=None):
    """Reap a subprocess.Popen child with wait4 and return
    (returncode, {"maxrss_kib", "cpu_s", "utime_s", "stime_s", "killed"}).
    With a timeout the child is killed when it has not exited by then
    (on_timeout(proc) if given, else SIGKILL to the child alone) and the
    result says so with "killed": True. Never use Popen.wait/communicate on
    the same child: they would reap it and lose its rusage."""
    killed = False
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if deadline is not None and time.monotonic() > deadline:
            try:
                if on_timeout is not None:
                    on_timeout(proc)
                else:
                    proc.kill()
            except ProcessLookupError:
                pass
            killed = True
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc  # so Popen does not try to reap it again
    return rc, {"maxrss_kib": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime,
                "utime_s": ru.ru_utime, "stime_s": ru.ru_stime,
                "killed": killed}


def communicate_rusage(proc, timeout=None, on_timeout=None):
    """Like Popen.communicate() for a child whose stdout (and stderr, when
    piped) must be read, but reaped with wait_rusage. Returns
    (returncode, rusage dict, stdout bytes, stderr bytes or None)."""
    bufs = {}

    def drain(name, f):
        bufs[name] = f.read()

    threads = []
    for name in ("stdout", "stderr"):
        f = getattr(proc, name)
        if f is not None:
            t = threading.Thread(target=drain, args=(name, f), daemon=True)
            t.start()
            threads.append(t)
    rc, ru = wait_rusage(proc, timeout, on_timeout)
    for t in threads:
        t.join(10)
    for name in ("stdout", "stderr"):
        f = getattr(proc, name)
        if f is not None:
            f.close()
    return rc, ru, bufs.get("stdout", b""), bufs.get("stderr")


def self_usage():
    """This process's own peak RSS (KiB) and CPU seconds."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"maxrss_kib": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime}


def read_pss_kib(pid):
    """Proportional set size (KiB) of a live pid: its private pages plus
    its share of pages it shares (forked DataLoader workers share what the
    parent read before the fork), or None."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class Sampler:
    """Polls the process trees under `roots()` (a callable returning pids)
    until stop(). Keeps, per pid, the highest VmHWM and CPU seconds seen and
    the process name; sums VmRSS over the trees on every poll (reported),
    and calls on_over(total_kib) once when the memory the trees hold exceeds
    limit_kib: the sum of PSS where /proc has it (pages shared by forked
    workers count once), else of VmRSS."""

    def __init__(self, roots, limit_kib=None, on_over=None):
        self._roots = roots
        self._limit = limit_kib
        self._on_over = on_over
        self._stop = threading.Event()
        self._thread = None
        self.peaks = {}   # pid -> {"name", "hwm_kib", "cpu_s"}
        self.max_total_rss_kib = 0
        self.max_total_pss_kib = 0
        self.over = None  # total KiB that tripped the limit

    def start(self):
        self._thread = threading.Thread(target=self._run, name="sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        total = 0
        held = 0
        for pid in descendants(self._roots()):
            st = read_status(pid)
            if st is None or "VmRSS" not in st:
                continue  # exited, or a kernel thread / zombie
            cpu = cpu_seconds(pid)
            total += st["VmRSS"]
            pss = read_pss_kib(pid)
            held += pss if pss is not None else st["VmRSS"]
            e = self.peaks.setdefault(pid, {"name": st.get("Name", "?"),
                                            "hwm_kib": 0, "cpu_s": 0.0})
            e["hwm_kib"] = max(e["hwm_kib"], st.get("VmHWM", 0))
            if cpu is not None:
                e["cpu_s"] = max(e["cpu_s"], cpu)
        self.max_total_rss_kib = max(self.max_total_rss_kib, total)
        self.max_total_pss_kib = max(self.max_total_pss_kib, held)
        if (self._limit is not None and self.over is None
                and held > self._limit):
            self.over = held
            if self._on_over is not None:
                self._on_over(held)

    def _run(self):
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:  # a vanished pid mid-scan: try again next tick
                pass
            self._stop.wait(POLL_S)

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def kill_tree(pids, sig=signal.SIGKILL):
    """Send sig to every pid in pids and their descendants (children
    first collected, then signalled), ignoring those already gone."""
    for pid in sorted(descendants(pids), reverse=True):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
