"""Object sets of a local directory stay inside it (docs/operations.md
"Datasets of small objects", SECURITY.md): symbolic links are not
followed; with ?objects&links=inside, links that resolve inside the
directory are, and links out of it, dangling ones and loops are not."""

import os

from server_testlib import get_json, read_share, wait_for


def make_tree(root):
    objs = os.path.join(root, "objs")
    os.makedirs(os.path.join(objs, "sub"))
    outside = os.path.join(root, "outside")
    os.makedirs(outside)
    for i in range(4):
        with open(os.path.join(objs, "s%02d.txt" % i), "w") as f:
            f.write("sample %d" % i)
    with open(os.path.join(objs, "sub", "s10.txt"), "w") as f:
        f.write("sample 10")
    with open(os.path.join(outside, "secret.txt"), "w") as f:
        f.write("outside the source")
    os.symlink(os.path.join(outside, "secret.txt"), os.path.join(objs, "abs.txt"))
    os.symlink("../outside/secret.txt", os.path.join(objs, "rel.txt"))
    os.symlink(outside, os.path.join(objs, "outdir"))
    os.symlink(".", os.path.join(objs, "loop"))
    os.symlink("s00.txt", os.path.join(objs, "inside.txt"))
    os.symlink("sub", os.path.join(objs, "subdir"))
    os.symlink("nowhere.txt", os.path.join(objs, "dangling.txt"))
    return objs


def keys_of(srv):
    assert wait_for(lambda: get_json(srv, "/v1/jobs/o")["state"] == "ready", 30), srv.log()
    got, outcome, _ = read_share(srv, "o", 0, 0, 1)
    assert outcome == "end"
    return sorted(s["key"] for s in got)


def test_links_are_not_followed_by_default(start, workdir):
    objs = make_tree(os.path.join(workdir, "links-default"))
    srv = start("--job", "o", "--source", objs + "?objects")
    assert wait_for(lambda: "event=objset_links_skipped" in srv.log(full=True), 30), srv.log()
    keys = keys_of(srv)
    assert keys == ["s00", "s01", "s02", "s03", "sub/s10"], keys
    line = [ln for ln in srv.log(full=True).splitlines() if "objset_links_skipped" in ln][0]
    assert "count=7" in line and "reason=" in line, line


def test_links_inside_are_followed_when_asked(start, workdir):
    objs = make_tree(os.path.join(workdir, "links-inside"))
    srv = start("--job", "o", "--source", objs + "?objects&links=inside")
    keys = keys_of(srv)
    log = srv.wait_log("event=objset_links_skipped")
    # inside.txt (a file) and subdir/ (a directory) resolve inside; the
    # links out of the directory, the dangling one and the loop do not
    assert keys == ["inside", "s00", "s01", "s02", "s03", "sub/s10", "subdir/s10"], keys
    assert not any("secret" in k or "outdir" in k or k.startswith("loop") for k in keys)
    line = [ln for ln in log.splitlines() if "objset_links_skipped" in ln][0]
    assert "count=5" in line, line  # abs, rel, outdir, loop, dangling
