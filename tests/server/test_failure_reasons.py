"""Every log line about a failure carries its reason (issue: a new user
saw `event=job_source_failed ... code=4` and nothing else)."""

import os

from server_testlib import wait_for


def test_a_source_that_fails_is_logged_with_its_reason(start, workdir):
    missing = os.path.join(workdir, "no-such-directory")
    srv = start("--job", "train", "--source", missing)
    line = wait_for(lambda: next((ln for ln in srv.log(full=True).splitlines()
                                  if "event=job_source_failed" in ln), None), 30)
    assert line, srv.log()
    assert 'reason="' in line and "no-such-directory" in line, line
    assert "No such file" in line or "not found" in line.lower(), line


def test_a_port_in_use_is_named(start, server_binary, small_ds):
    import subprocess
    srv = start("--job", "train", "--source", small_ds.path)
    p = subprocess.run([server_binary, "--job", "train", "--source", small_ds.path,
                        "--listen", srv.host, "--port", str(srv.port)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "cannot listen on %s port %d: Address already in use" % (srv.host, srv.port) \
        in p.stderr, p.stderr[-2000:]
