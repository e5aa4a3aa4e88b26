"""What scripts/demo prints a lessee: every ``jmp`` command parses with jmp
0.9.0's own command line (its click group, none run), leases are made and
ended through jmp (not through the API's Lease objects), and each names the
demo's client config and the sample set's labels."""

import importlib.util
import shlex
from pathlib import Path

import click
import pytest
from jumpstarter_cli.jmp import jmp

DEMO = Path(__file__).resolve().parents[3] / "scripts" / "demo.py"
spec = importlib.util.spec_from_file_location("demo", DEMO)
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
CONFIG = Path("/state/client.yaml")


def commands(shell):
    lines = demo.usage({"KUBECONFIG": "/state/kubeconfig"}, CONFIG, shell=shell)
    return [shlex.split(line.split("#")[0]) for line in lines if line.strip().startswith("jmp ")]


def parse(argv):
    """The leaf command ``argv`` reaches, and its parsed parameters."""
    assert argv[0] == "jmp"
    group, args, context = jmp, argv[1:], None
    while isinstance(group, click.Group):
        context = group.make_context(group.name, list(args), parent=context, resilient_parsing=False)
        name, group, args = group.resolve_command(context, context.protected_args + context.args)
    return group.name, group.make_context(group.name, list(args), parent=context).params


@pytest.mark.parametrize("shell", [False, True], ids=["kwok", "real-node"])
def test_every_jmp_command_the_demo_prints_parses_with_jmp(shell):
    argvs = commands(shell)
    parsed = [parse([word.replace("LEASE", "0a1b") for word in argv]) for argv in argvs]
    names = [name for name, _ in parsed]
    assert names == ["lease", "leases", *(["shell", "shell"] if shell else []), "leases"]
    for argv in argvs:
        assert argv[argv.index("--client-config") + 1] == str(CONFIG)
    assert parsed[-1][1]["names"] == ("0a1b",)
    create = parsed[0][1]
    assert create["selector"] == demo.BOARD and create["duration"] is not None


def test_the_lease_ends_through_jmp_not_through_the_api():
    printed = "\n".join(demo.usage({}, CONFIG, shell=True))
    assert "jmp delete leases" in printed
    assert "delete lease " not in printed.replace("jmp delete leases", "")
    assert "kind\\\": \\\"Lease" not in printed and "kubectl -n demo create" not in printed


def test_the_test_process_keeps_pythons_ssl_context_though_it_imported_jmp():
    """jumpstarter_cli's import, above, swapped in truststore's context;
    tests/conftest.py puts Python's back once collection is done."""
    import ssl

    import urllib3.util.ssl_

    assert ssl.SSLContext.__module__ == "ssl", ssl.SSLContext
    assert urllib3.util.ssl_.SSLContext is ssl.SSLContext
