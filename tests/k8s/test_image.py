"""The image recipe (k8s/image/Containerfile): its runtime package list
matches what shardcastd links, and the recipe keeps its promises
(multi-stage, Debian 12, non-root, nothing but the runtime packages).

The link check: every shared library shardcastd needs directly (ELF
NEEDED, resolved with ldd) belongs, by `dpkg -S`, to a package that is in
runtime-packages.txt or in every Debian base image (an Essential package
or a dependency of one, i.e. what debootstrap's minbase installs: libc6,
zlib1g, libzstd1, ...); and every listed package owns such a library unless it
is marked "not-linked:" with a reason. Libraries needed only through those
packages come with their Debian dependencies."""

import os
import re
import subprocess

import pytest

from k8s_testlib import K8S

IMAGE = os.path.join(K8S, "image")
# Runtime libraries of sanitizer builds: never in a release image.
SANITIZER_LIBS = re.compile(r"^lib(asan|ubsan|tsan|lsan)\.so")


def runtime_packages():
    pkgs, not_linked = [], set()
    with open(os.path.join(IMAGE, "runtime-packages.txt")) as f:
        for line in f:
            text, _, comment = line.partition("#")
            name = text.strip()
            if not name:
                continue
            pkgs.append(name)
            if comment.strip().startswith("not-linked:"):
                not_linked.add(name)
    return pkgs, not_linked


def needed_libraries(binary):
    """{soname: resolved path} of the binary's direct NEEDED entries."""
    dyn = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True,
                         check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    where = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
    missing = [n for n in needed if n not in where]
    assert not missing, "ldd cannot resolve %s:\n%s" % (missing, ldd)
    return {n: where[n] for n in needed if not SANITIZER_LIBS.match(n)}


def owning_package(path):
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/lib/"):
            candidates.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            candidates.append("/usr" + p)
    for p in candidates:
        out = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.split(":", 1)[0].strip()
    raise AssertionError("no Debian package owns %s" % path)


def priority(pkg):
    return subprocess.run(["dpkg-query", "-W", "-f=${Priority}", pkg], capture_output=True,
                          text=True, check=True).stdout.strip()


def base_image_packages():
    """Essential packages of this Debian system and the closure of their
    Pre-Depends/Depends: what every Debian base image has."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Essential}\t${Pre-Depends}, "
                          "${Depends}\n"], capture_output=True, text=True, check=True).stdout
    deps, todo = {}, []
    for line in out.splitlines():
        name, essential, rel = line.split("\t")
        # "a (>= 1), b | c" -> every alternative counts as possibly present;
        # take the first, which apt installs.
        deps[name] = [alt.split("|")[0].split("(")[0].split(":")[0].strip()
                      for alt in rel.split(",") if alt.strip()]
        if essential == "yes":
            todo.append(name)
    seen = set()
    while todo:
        p = todo.pop()
        if p in seen or p not in deps:
            continue
        seen.add(p)
        todo.extend(deps[p])
    return seen


def test_runtime_packages_match_linked_libraries(shardcastd):
    listed, not_linked = runtime_packages()
    assert len(set(listed)) == len(listed), "duplicate entries"
    libs = needed_libraries(shardcastd)
    owners = {lib: owning_package(p) for lib, p in libs.items()}
    assert "libmicrohttpd.so.12" in owners and "libcurl.so.4" in owners, owners
    base = base_image_packages()
    assert "libc6" in base and "coreutils" in base
    unlisted = {lib: pkg for lib, pkg in owners.items() if pkg not in listed and pkg not in base}
    assert not unlisted, ("shardcastd links libraries whose packages runtime-packages.txt "
                          "lacks: %s" % unlisted)
    unneeded = [p for p in listed if p not in owners.values() and p not in not_linked]
    assert not unneeded, ("runtime-packages.txt lists packages shardcastd does not link "
                          "(mark them 'not-linked: reason' or remove them): %s" % unneeded)
    for p in listed:
        assert not p.endswith("-dev"), p
        # A real Debian package name (installed here: the build machine
        # has the runtime libraries the -dev packages depend on).
        assert priority(p) in ("optional", "required", "important", "standard"), p


def containerfile():
    with open(os.path.join(IMAGE, "Containerfile")) as f:
        return f.read()


def stages(text):
    """[(name, [instruction lines])] of the recipe's build stages."""
    out = []
    lines = re.sub(r"\\\n", " ", text).splitlines()
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?$", line, re.I)
        if m:
            out.append((m.group(2), m.group(1), []))
        elif out:
            out[-1][2].append(line)
    return out


def test_recipe_is_multistage_debian12_nonroot():
    text = containerfile()
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert m and re.search(r"debian:12|bookworm", m.group(1)), "base must be Debian 12"
    st = stages(text)
    assert [s[0] for s in st] == ["build", "runtime"], st
    assert all(s[1] == "${BASE_IMAGE}" for s in st)
    build, runtime = st[0][2], st[1][2]
    assert any("cmake --build" in i for i in build)
    # the daemon is installed by the install rules (component server) into
    # a staging tree, which the runtime stage copies whole
    assert any(re.search(r"DESTDIR=/install cmake --install /build --component server\b", i)
               for i in build), build
    rt = "\n".join(runtime)
    # runtime: only the listed packages, no compiler, no -dev package
    assert "runtime-packages.txt" in rt
    assert not re.search(r"-dev\b|build-essential|cmake|gcc", rt), rt
    assert "COPY --from=build /install/ /" in rt
    assert "k8s/image/entrypoint.sh /usr/local/bin/shardcast-entrypoint" in rt
    users = [i for i in runtime if i.upper().startswith("USER ")]
    assert users and users[-1].split()[1] == "65532:65532", users
    assert re.search(r'ENTRYPOINT \["/usr/local/bin/shardcast-entrypoint"\]', rt)
    # apt lists and caches are removed in the layer that made them
    assert "rm -rf /var/lib/apt/lists/*" in rt


def test_build_context_filter_admits_what_the_recipe_copies():
    with open(os.path.join(IMAGE, "containerignore")) as f:
        rules = [r.strip() for r in f if r.strip() and not r.startswith("#")]
    assert rules[0] == "*"
    allowed = {r[1:].rstrip("/") for r in rules[1:] if r.startswith("!")}
    copied = re.findall(r"^COPY (?!--from)(?:--\S+ )*(\S+)", containerfile(), re.M)
    for src in copied:
        src = src.rstrip("/")
        assert src in allowed, "COPY %s is filtered out of the build context" % src
        assert os.path.exists(os.path.join(K8S, "..", src)), src


def test_manifest_user_matches_image():
    text = containerfile()
    uid = re.findall(r"^USER (\d+):(\d+)$", text, re.M)[-1]
    with open(os.path.join(K8S, "base", "deployment.yaml")) as f:
        dep = f.read()
    assert "runAsUser: %s" % uid[0] in dep and "runAsGroup: %s" % uid[1] in dep


@pytest.mark.parametrize("script", ["entrypoint.sh", "build.sh"])
def test_shell_scripts_parse(script):
    path = os.path.join(IMAGE, script)
    assert os.access(path, os.X_OK), "%s is not executable" % script
    subprocess.run(["sh", "-n", path], check=True)
