"""Disk images a tenant could give as its ``disk.url``, made by the real
``qemu-img``, each checked as QEMU is told to open it (the class's format:
qcow2 by default, or raw): other formats that name files (a VMDK whose
descriptor names /etc/shadow as its extent, a qcow2 whose backing file is a
``json:`` pseudo-protocol) or need more than the file (LUKS, VHDX) are
refused as qcow2; raw is data whatever it holds, and QEMU, told ``raw``,
opens a file with a qcow2 header at its start as raw, with no backing."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import images

QEMU_IMG = shutil.which("qemu-img")


def qemu_img(*args):
    assert QEMU_IMG, "qemu-img is part of the test bed"
    done = subprocess.run([QEMU_IMG, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def made(tmp_path, kind):
    path = tmp_path / f"image.{kind}"
    if kind == "qcow2-json-backing":
        backing = json.dumps({"driver": "raw", "file": {"driver": "file", "filename": "/etc/passwd"}})
        qemu_img("create", "-f", "qcow2", "-u", "-b", f"json:{backing}", "-F", "raw", str(path), "1M")
    elif kind == "qcow2-rebased":
        qemu_img("create", "-f", "qcow2", str(path), "1M")
        qemu_img("rebase", "-u", "-f", "qcow2", "-b", "/etc/passwd", "-F", "raw", str(path))
    elif kind == "vmdk-extent":
        path.write_text('# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n'
                        'createType="monolithicFlat"\nRW 8 FLAT "/etc/shadow" 0\n')
    elif kind == "luks":
        # qemu-img times PBKDF2 by the thread's CPU clock, which a tick-based
        # kernel can read as unchanged; it then refuses, and a second try reads it.
        assert QEMU_IMG, "qemu-img is part of the test bed"
        for _ in range(5):
            done = subprocess.run([QEMU_IMG, "create", "-f", "luks", "--object", "secret,id=s0,data=x",
                                   "-o", "key-secret=s0", str(path), "1M"], capture_output=True, text=True)
            if "Unable to get accurate CPU usage" not in done.stderr:
                break
        assert done.returncode == 0, done.stderr
    else:
        qemu_img("create", "-f", kind, str(path), "1M")
    return path


@pytest.mark.parametrize("kind", ["qcow2-json-backing", "qcow2-rebased", "vmdk-extent", "vmdk", "vhdx", "luks", "vpc"])
def test_an_image_of_another_format_or_naming_a_file_is_refused_as_qcow2(tmp_path, kind):
    path = made(tmp_path, kind)
    problem = images.standalone_problem(str(path), "qcow2")
    assert problem is not None
    if kind.startswith("qcow2"):
        assert "backing file" in problem
        # QEMU would follow it: its own view of the header names the file.
        info = json.loads(qemu_img("info", "-U", "--output=json", "-f", "qcow2", str(path)))
        assert "/etc/passwd" in info["backing-filename"]
    else:
        assert problem == "not a qcow2 image"


def test_a_raw_image_with_a_qcow2_header_is_data_and_qemu_told_raw_opens_it_so(tmp_path):
    path = made(tmp_path, "qcow2-rebased")  # a qcow2 header naming /etc/passwd, at byte 0
    assert images.standalone_problem(str(path), "raw") is None
    info = json.loads(qemu_img("info", "-U", "--output=json", "-f", "raw", str(path)))
    assert info["format"] == "raw" and "backing-filename" not in info
