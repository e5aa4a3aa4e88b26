"""The image cache kept within its quota (``image_fetch.prune_cache``): least
recently used digests go first, until the cache fits; an instance's own
digests, any used or downloaded within the idle time and any whose lock is
held stay; the ``images`` container's command prunes after its fetch."""

import fcntl
import json
import os
import tempfile
import time

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from hypothesis import given, settings
from hypothesis import strategies as st

HOUR = 3600
NOW = 1_900_000_000.0


def digest_of(number):
    return f"sha256:{number:064x}"


def put(cache, number, size, age, now=NOW):
    """A cache entry of ``size`` bytes last used ``age`` seconds before ``now``."""
    path = image_fetch.cache_path(str(cache), digest_of(number))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(b"x" * size)
    os.utime(path, (now - age, now - age))
    return path


def names(digests):
    return [f"sha256/{digest.split(':')[1]}" for digest in digests]


def present(cache):
    directory = os.path.join(str(cache), "sha256")
    return sorted(name for name in os.listdir(directory) if not name.endswith(".lock"))


def test_least_recently_used_go_first_until_the_cache_fits(tmp_path):
    for number, age in ((1, 5 * HOUR), (2, 2 * HOUR), (3, 4 * HOUR), (4, 3 * HOUR)):
        put(tmp_path, number, 10, age)
    removed = image_fetch.prune_cache(str(tmp_path), 25, now=NOW)
    assert removed == names([digest_of(1), digest_of(3)])
    assert present(tmp_path) == [digest_of(n).split(":")[1] for n in (2, 4)]


def test_a_cache_within_its_quota_is_left_alone(tmp_path):
    for number in range(3):
        put(tmp_path, number, 10, 9 * HOUR)
    assert image_fetch.prune_cache(str(tmp_path), 30, now=NOW) == []
    assert len(present(tmp_path)) == 3


def test_the_callers_own_and_the_recently_used_stay_whatever_the_quota(tmp_path):
    put(tmp_path, 1, 10, 9 * HOUR)           # the caller's: kept though the oldest
    put(tmp_path, 2, 10, 8 * HOUR)           # removed
    put(tmp_path, 3, 10, HOUR - 60)          # used within the idle time: kept
    removed = image_fetch.prune_cache(str(tmp_path), 0, keep=[digest_of(1)], now=NOW)
    assert removed == names([digest_of(2)])
    assert present(tmp_path) == [digest_of(n).split(":")[1] for n in (1, 3)]


def test_a_digest_whose_lock_is_held_stays(tmp_path):
    put(tmp_path, 1, 10, 9 * HOUR)
    put(tmp_path, 2, 10, 8 * HOUR)
    path = image_fetch.cache_path(str(tmp_path), digest_of(1))
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # another instance noting its use, or a download
        assert image_fetch.prune_cache(str(tmp_path), 0, now=NOW) == names([digest_of(2)])
    assert image_fetch.prune_cache(str(tmp_path), 0, now=NOW) == names([digest_of(1)])


def test_mark_used_makes_a_digest_recent(tmp_path):
    put(tmp_path, 1, 10, 9 * HOUR)
    put(tmp_path, 2, 10, 8 * HOUR)
    image_fetch.mark_used(str(tmp_path), [digest_of(1), digest_of(7)], now=NOW)  # 7 is not cached
    assert image_fetch.prune_cache(str(tmp_path), 0, now=NOW) == names([digest_of(2)])
    assert not os.path.exists(image_fetch.cache_path(str(tmp_path), digest_of(7)))


def test_partial_downloads_count_and_go_once_idle_unless_a_download_holds_the_lock(tmp_path):
    put(tmp_path, 1, 10, HOUR - 1)
    directory = tmp_path / "sha256"
    stale = directory / f".{digest_of(2).split(':')[1]}.abc123.part"
    stale.write_bytes(b"y" * 50)
    os.utime(stale, (NOW - 2 * HOUR, NOW - 2 * HOUR))
    busy = directory / f".{digest_of(3).split(':')[1]}.def456.part"
    busy.write_bytes(b"z" * 50)
    os.utime(busy, (NOW - 2 * HOUR, NOW - 2 * HOUR))
    with open(image_fetch.cache_path(str(tmp_path), digest_of(3)) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert image_fetch.prune_cache(str(tmp_path), 10, now=NOW) == [f"sha256/{stale.name}"]
    assert busy.exists()


def test_what_is_not_a_cache_entry_is_never_touched(tmp_path):
    put(tmp_path, 1, 10, 9 * HOUR)
    directory = tmp_path / "sha256"
    (directory / ("d" * 64)).mkdir()                      # what a kubelet makes of a missing subPath
    (directory / "notes.txt").write_bytes(b"n" * 100)
    (directory / (digest_of(5).split(":")[1] + ".lock")).write_bytes(b"")
    os.utime(directory / "notes.txt", (NOW - 9 * HOUR,) * 2)
    assert image_fetch.prune_cache(str(tmp_path), 0, now=NOW) == names([digest_of(1)])
    assert sorted(os.listdir(directory)) == sorted(["d" * 64, "notes.txt", digest_of(5).split(":")[1] + ".lock",
                                                    digest_of(1).split(":")[1] + ".lock"])


def test_a_missing_cache_prunes_nothing(tmp_path):
    assert image_fetch.prune_cache(str(tmp_path / "none"), 0) == []


ENTRY = st.tuples(st.integers(0, 100), st.integers(0, 10 * HOUR), st.booleans(), st.booleans())


@settings(max_examples=60, deadline=None)
@given(entries=st.lists(ENTRY, max_size=8), quota=st.integers(0, 500))
def test_prune_removes_the_fewest_least_recently_used_unprotected_digests(entries, quota):
    """Whatever the cache holds: nothing protected goes; what goes is the
    oldest of the rest; it stops as soon as the cache fits, and goes on
    until it fits or nothing unprotected is left."""
    with tempfile.TemporaryDirectory() as cache:
        locks = []
        info = {}
        for number, (size, age, kept, locked) in enumerate(entries):
            put(cache, number, size, age)
            info[digest_of(number)] = (size, age, kept, locked)
            if locked:
                lock = open(image_fetch.cache_path(cache, digest_of(number)) + ".lock", "a")
                fcntl.flock(lock, fcntl.LOCK_SH)
                locks.append(lock)
        try:
            removed = image_fetch.prune_cache(cache, quota, keep=[d for d, i in info.items() if i[2]], now=NOW)
        finally:
            for lock in locks:
                lock.close()
        gone = {f"sha256:{name.split('/')[1]}" for name in removed}
        assert len(gone) == len(removed)

        def protected(digest):
            _, age, kept, locked = info[digest]
            return kept or locked or age < image_fetch.PRUNE_MIN_IDLE_SECONDS

        assert not any(protected(digest) for digest in gone)
        for digest in info:
            assert os.path.exists(image_fetch.cache_path(cache, digest)) == (digest not in gone)
        # In order of last use, oldest first (then by name).
        order = sorted((d for d in info if not protected(d)), key=lambda d: (-info[d][1], d))
        assert [f"sha256:{name.split('/')[1]}" for name in removed] == order[:len(removed)]
        left = sum(info[d][0] for d in info if d not in gone)
        if len(removed) < len(order):
            assert left <= quota
        if removed:
            assert left + info[order[len(removed) - 1]][0] > quota


LINK_NAMES = ("kernel", "disk.base")
# What an instance directory's entry may be: a link into the cache (a valid
# entry, or a lock or partial name there), a link elsewhere, a plain file.
LINK = st.one_of(
    st.tuples(st.just("cache"), st.integers(0, 5)),
    st.tuples(st.just("cache-other"), st.sampled_from(["x.lock", "." + "a" * 64 + ".1.part", "a" * 63])),
    st.tuples(st.just("elsewhere"), st.integers(0, 5)),
    st.tuples(st.just("file"), st.integers(0, 5)),
)


@settings(max_examples=60, deadline=None)
@given(instances=st.lists(st.dictionaries(st.sampled_from(LINK_NAMES + ("disk.qcow2",)), LINK), max_size=4))
def test_the_digests_linked_from_instance_directories_are_those_of_links_into_the_cache(instances):
    """A digest counts when an instance directory has a link at one of the
    names into the cache's entry for it; a link elsewhere, a plain file, a
    link at another name or to a name that is no entry does not."""
    with tempfile.TemporaryDirectory() as work:
        cache, root = os.path.join(work, "image-cache"), os.path.join(work, "instances")
        expected = set()
        for index, entries in enumerate(instances):
            directory = os.path.join(root, f"ns.pool-{index}")
            os.makedirs(directory)
            for name, (kind, value) in entries.items():
                path = os.path.join(directory, name)
                if kind == "file":
                    _write(path, b"x")
                    continue
                if kind == "cache":
                    target = image_fetch.cache_path(cache, digest_of(value))
                elif kind == "cache-other":
                    target = os.path.join(cache, "sha256", value)
                else:
                    target = os.path.join(work, "sha256", digest_of(value).split(":")[1])
                os.symlink(target, path)
                if kind == "cache" and name in LINK_NAMES:
                    expected.add(digest_of(value))
        assert image_fetch.linked_digests(root, cache, LINK_NAMES) == expected


def test_no_instances_directory_links_nothing(tmp_path):
    assert image_fetch.linked_digests(str(tmp_path / "none"), str(tmp_path), LINK_NAMES) == set()


@pytest.mark.parametrize(("read", "annotation", "default"), [
    (image_fetch.class_cache_quota, image_fetch.ANNOTATION_CACHE_QUOTA, image_fetch.DEFAULT_CACHE_QUOTA_BYTES),
    (image_fetch.class_max_bytes, image_fetch.ANNOTATION_MAX_SIZE, image_fetch.DEFAULT_MAX_BYTES),
])
def test_a_class_size_is_its_annotation_or_the_default(read, annotation, default):
    assert read(None) == read({"metadata": {}}) == default
    assert read({"metadata": {"annotations": {annotation: "100Gi"}}}) == 100 << 30
    for bad in ("0", "-1Gi", "lots"):
        with pytest.raises(ValueError, match=annotation):
            read({"metadata": {"annotations": {annotation: bad}}})


def test_entry_digests_are_the_valid_ones_normalised_once():
    files = [{"url": "u", "digest": "SHA256:" + "A" * 64}, {"url": "u", "digest": "sha256:" + "a" * 64},
             {"url": "u", "digest": None}, {"url": "u", "digest": "sha256:../x"}]
    assert image_fetch.entry_digests(files) == ["sha256:" + "a" * 64]


def test_the_images_containers_command_keeps_its_own_digest_and_prunes_the_cache_to_the_class_quota(
        tmp_path, capsys):
    """The rendered ``images`` command, run in process: its image is a cache
    hit (no request), older than every other entry, yet kept and marked used;
    the other idle digests go, least recently used first, down to the quota."""
    content = b"the instance's kernel"
    digest = image_fetch.file_digest(_write(tmp_path / "kernel.src", content))
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    run_dir.mkdir()
    own = image_fetch.cache_path(str(cache), digest)
    os.makedirs(os.path.dirname(own))
    _write(own, content)
    now = time.time()
    os.utime(own, (now - 30 * HOUR, now - 30 * HOUR))
    for number, age in ((1, 20 * HOUR), (2, 10 * HOUR), (3, 5 * HOUR)):
        put(cache, number, 1 << 20, age, now=now)
    vclass = {"metadata": {"annotations": {image_fetch.ANNOTATION_CACHE_QUOTA: "1536Ki"}}, "spec": {}}
    pod = k8s_pod.instance_pod(
        {"metadata": {"name": "pool", "namespace": "lab"}, "spec": {"template": {"spec": {"drivers": []}}}},
        vclass, {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
                 "metadata": {"name": "pool-0", "namespace": "lab", "uid": "e"}},
        "qemu.jumpstarter.dev", {"resources": {"memory": "128Mi"},
                                 "kernel": {"url": "http://127.0.0.1:9/vmlinuz", "digest": digest}}, None)
    argv = list(pod["spec"]["initContainers"][0]["command"])
    assert argv[:2] == ["python3", "-c"]
    argv = argv[3:]
    argv[argv.index("--cache") + 1] = str(cache)
    files = json.loads(argv[argv.index("--files") + 1])
    files[0]["dest"] = str(run_dir / "kernel")
    argv[argv.index("--files") + 1] = json.dumps(files)
    assert image_fetch.main(argv) == 0
    said = json.loads(capsys.readouterr().out)
    assert said == {"downloaded": [], "pruned": names([digest_of(1), digest_of(2)])}
    assert os.readlink(run_dir / "kernel") == own
    assert os.stat(own).st_mtime >= now
    assert os.path.exists(image_fetch.cache_path(str(cache), digest_of(3)))


def _write(path, content):
    with open(path, "wb") as out:
        out.write(content)
    return str(path)
