"""images.standalone_problem on qcow2 headers written here byte by byte: what
QEMU would open besides the file itself (a backing file, an external data
file) is found, and no header makes it fail other than by saying so.
The same check on images made by qemu-img, fetched and booted: test_hostile_images.py."""

from __future__ import annotations

import struct

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import images
from hypothesis import given, settings
from hypothesis import strategies as st

V3_HEADER_LENGTH = 104
DATA_FILE_EXTENSION = 0x44415441
BACKING_FORMAT_EXTENSION = 0xE2792ACA


def qcow2_header(*, version=3, backing=b"", incompatible=0, extensions=()):
    """A qcow2 header as QEMU writes it (cluster size 64 KiB), extensions and end marker
    after it and the backing file name, if any, after those."""
    length = V3_HEADER_LENGTH if version == 3 else images.QCOW2_V2_HEADER_LENGTH
    body = b""
    for kind, data in extensions:
        body += struct.pack(">II", kind, len(data)) + data + b"\0" * (-len(data) % 8)
    body += struct.pack(">II", 0, 0)
    backing_offset = length + len(body) if backing else 0
    header = struct.pack(">4sIQIIQIIQQIIQ", images.QCOW2_MAGIC, version, backing_offset,
                         len(backing), 16, 1 << 30, 0, 2, 3 * 65536, 65536, 1, 1, 4 * 65536)
    if version == 3:
        header += struct.pack(">QQQII", incompatible, 0, 0, 4, V3_HEADER_LENGTH)
    assert len(header) == length
    return header + body + backing


def problem(tmp_path, data, image_format="qcow2"):
    path = tmp_path / "image"
    path.write_bytes(data)
    return images.standalone_problem(str(path), image_format)


@pytest.mark.parametrize("version", [2, 3])
def test_a_plain_qcow2_image_is_standalone(tmp_path, version):
    assert problem(tmp_path, qcow2_header(version=version) + b"\0" * 4096) is None


@pytest.mark.parametrize("version", [2, 3])
def test_a_backing_file_is_found_whatever_it_names(tmp_path, version):
    header = qcow2_header(version=version, backing=b"../other.pool-0/exporter.yaml",
                          extensions=[(BACKING_FORMAT_EXTENSION, b"raw")])
    assert "backing file" in problem(tmp_path, header)


def test_a_backing_name_of_zero_length_at_an_offset_is_still_refused(tmp_path):
    header = bytearray(qcow2_header())
    header[8:16] = (200).to_bytes(8, "big")
    assert "backing file" in problem(tmp_path, bytes(header))


def test_an_external_data_file_is_found_by_its_feature_bit_and_by_its_extension(tmp_path):
    by_bit = qcow2_header(incompatible=1 << 2)
    by_extension = qcow2_header(extensions=[(DATA_FILE_EXTENSION, b"/var/lib/other/disk")])
    assert "external data file" in problem(tmp_path, by_bit)
    assert "external data file" in problem(tmp_path, by_extension)


def test_unknown_incompatible_features_and_versions_are_refused(tmp_path):
    assert "unknown incompatible" in problem(tmp_path, qcow2_header(incompatible=1 << 9))
    header = bytearray(qcow2_header())
    header[4:8] = (4).to_bytes(4, "big")
    assert "version 4" in problem(tmp_path, bytes(header))


def test_extensions_that_never_end_are_refused(tmp_path):
    header = qcow2_header()[:V3_HEADER_LENGTH]
    endless = header + struct.pack(">II", 0x12345678, 0) * (images._QCOW2_HEADER_READ // 8)
    assert "do not end" in problem(tmp_path, endless)


@pytest.mark.parametrize("data", [b"", b"QFI", b"\x7fELF" + b"\0" * 200, b"QFI\xfb" + b"\0" * 10])
def test_what_is_not_a_whole_qcow2_header_is_refused_as_qcow2(tmp_path, data):
    assert problem(tmp_path, data) is not None


@pytest.mark.parametrize("image_format", [None, "raw"])
def test_raw_and_plain_files_are_data_whatever_they_hold(tmp_path, image_format):
    header = qcow2_header(backing=b"/etc/shadow")
    assert problem(tmp_path, header, image_format) is None


def test_other_formats_are_refused(tmp_path):
    assert "vmdk" in problem(tmp_path, b"# Disk DescriptorFile\n", "vmdk")


@settings(max_examples=300, deadline=None)
@given(position=st.integers(0, V3_HEADER_LENGTH + 64), value=st.binary(min_size=1, max_size=8),
       tail=st.binary(max_size=64))
def test_no_header_raises_and_a_backing_offset_is_never_accepted(tmp_path_factory, position, value,
                                                                 tail):
    data = bytearray(qcow2_header(extensions=[(BACKING_FORMAT_EXTENSION, b"qcow2")]))
    data[position:position + len(value)] = value
    data += tail
    found = problem(tmp_path_factory.mktemp("h"), bytes(data))
    assert found is None or isinstance(found, str)
    if len(data) >= 20 and data[:4] == images.QCOW2_MAGIC and (
            int.from_bytes(data[8:16], "big") or int.from_bytes(data[16:20], "big")):
        assert found is not None
    if len(data) >= 80 and data[:8] == images.QCOW2_MAGIC + (3).to_bytes(4, "big") and \
            int.from_bytes(data[72:80], "big") & (1 << 2):
        assert found is not None
