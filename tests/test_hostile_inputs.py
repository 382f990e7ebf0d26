"""Files and flag values a user (or a script gone wrong) hands to `bench transfer`, `check` and `list`.

Every case builds the real thing: symlinks, FIFOs, /dev/zero and /dev/full, a file over the size cap,
a real write failure (RLIMIT_FSIZE: the kernel refuses the write with EFBIG), invalid UTF-8, JSON
and TOML nested 100,000 deep. What a user relies on: one line on stderr, exit 2, nothing hangs, and
a file devctl writes never goes through a link nor replaces the old one with half a file.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import assert_usage_error, devctl_env, run_devctl

# A run of every check would take a minute; one quick check is enough to produce a report.
QUICK_CHECK = ("check", "--only", "versions")
BENCH_SMALL = ("bench", "transfer", "--sizes", "4K", "--repeats", "3", "--min-time", "0", "--direction", "h2d")
LONG = "x" * 100_000


def env(**extra: str) -> dict[str, str]:
    return devctl_env(devices=2, **extra)


def one_line_exit_2(proc, *needles: str) -> None:
    assert_usage_error(proc, *needles)
    # A 100,000-character value is quoted cut short: the line stays readable.
    assert len(proc.stderr) < 1000, proc.stderr[:300]


# ---- --junit-xml: written whole, never through a link ------------------------------------------------


def test_junit_xml_replaces_a_symlink_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    link = tmp_path / "report.xml"
    link.symlink_to(victim)
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", str(link), env=env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "someone else's file\n"
    assert not link.is_symlink() and ET.parse(link).getroot().tag == "testsuites"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # no temporary file left behind


@pytest.mark.parametrize("target, kind", [("/dev/full", "not a regular file"), ("/dev/null", "not a regular file")])
def test_junit_xml_to_a_device_is_refused_before_any_check(tmp_path, target, kind):
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", target, env=env(), cwd=tmp_path)
    one_line_exit_2(proc, "--junit-xml", target, kind)
    assert proc.stdout == ""


def test_junit_xml_link_to_dev_full_and_a_fifo_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.xml"
    os.mkfifo(fifo)  # opening it to write would block until a reader came
    link = tmp_path / "full.xml"
    link.symlink_to("/dev/full")
    for path in (fifo, link):
        one_line_exit_2(run_devctl(*QUICK_CHECK, "--junit-xml", str(path), env=env(), cwd=tmp_path, timeout=60), "not a regular file")


def test_junit_xml_in_dev_is_refused(tmp_path):
    # As root a file could be created in /dev; devctl never writes there.
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", "/dev/devctl-report.xml", env=env(), cwd=tmp_path)
    one_line_exit_2(proc, "/dev, /proc or /sys")
    assert not os.path.exists("/dev/devctl-report.xml")


def _limit_file_size():
    # The kernel then refuses any write past 100 bytes with EFBIG (Python ignores SIGXFSZ): a real failed
    # write, as a full disk gives. The report is several hundred bytes.
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))


def test_failed_junit_write_leaves_the_old_file_and_is_one_line_exit_2(tmp_path):
    old = tmp_path / "report.xml"
    old.write_text("<old/>\n")
    proc = subprocess.run(
        [sys.executable, "-m", "devctl", *QUICK_CHECK, "--junit-xml", str(old)],
        env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=120, preexec_fn=_limit_file_size,
    )  # fmt: skip
    one_line_exit_2(proc, "--junit-xml", "was not written", "File too large", "old file")
    assert old.read_text() == "<old/>\n"
    assert "versions" in proc.stdout  # the verdicts were shown before the file failed
    assert sorted(os.listdir(tmp_path)) == ["report.xml"]


def test_junit_xml_dash_prints_the_xml_on_stdout_instead_of_the_table(tmp_path):
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", "-", env=env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    suite = ET.fromstring(proc.stdout.split("\n", 1)[1]).find("testsuite")
    assert [c.get("name") for c in suite.iter("testcase")] == ["versions"]
    assert not (tmp_path / "-").exists()
    one_line_exit_2(run_devctl(*QUICK_CHECK, "--junit-xml", "-", "--json", env=env(), cwd=tmp_path), "both write to stdout")


def test_junit_xml_stays_valid_xml_when_a_message_quotes_a_control_character(tmp_path):
    report = tmp_path / "report.xml"
    proc = run_devctl("check", "--only", "devices", "--device-kind", "H\x01", "--junit-xml", str(report), env=env(), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    failure = ET.parse(report).getroot().find("testsuite/testcase/failure")  # XML 1.0 cannot hold \x01 itself
    assert "H\\x01" in failure.get("message")


# ---- --baseline: a regular file, capped, parsed once, every figure checked ---------------------------------


@pytest.fixture(scope="module")
def baseline_doc() -> dict:
    proc = run_devctl(*BENCH_SMALL, "--json", env=env())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("target, kind", [("/dev/zero", "character device"), ("/dev/full", "character device"), ("/", "directory")])
def test_baseline_that_is_not_a_regular_file_is_refused_before_reading(target, kind):
    # /dev/zero used to be read to the end: gigabytes of RSS, deaf to SIGTERM.
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", target, env=env(), timeout=60), "--baseline", kind)


def test_baseline_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "base.json"
    os.mkfifo(fifo)
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", str(fifo), env=env(), timeout=60), "FIFO")


def test_baseline_over_the_cap_is_refused(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(17 << 20)  # sparse: costs no disk
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", str(big), env=env()), "larger than")


def test_baseline_through_a_symlink_is_followed(tmp_path, baseline_doc):
    real = tmp_path / "real.json"
    real.write_text(json.dumps(baseline_doc))
    link = tmp_path / "base.json"
    link.symlink_to(real)
    # One size (4K) shows no fixed cost to tell it bandwidth-bound: --gate-all-sizes judges it anyway.
    proc = run_devctl(*BENCH_SMALL, "--baseline", str(link), "--max-regression", "99%", "--gate-all-sizes", "--json", env=env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["gate"]["compared"] == 1


@pytest.mark.parametrize(
    "figure, needle",
    [
        (float("nan"), "gbps nan"),  # json.dumps writes NaN, json.loads reads it back
        (float("inf"), "gbps inf"),
        (-3.0, "gbps -3.0"),
        (0, "gbps 0"),
    ],
)
def test_baseline_with_a_figure_that_was_not_measured_is_invalid(tmp_path, baseline_doc, figure, needle):
    # A NaN baseline made every comparison false: the gate passed whatever was measured.
    doc = json.loads(json.dumps(baseline_doc))
    for cell in doc["results"]:
        cell["gbps"] = figure
    path = tmp_path / "base.json"
    path.write_text(json.dumps(doc))
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", str(path), env=env()), "results[0]", needle)


def test_baseline_with_a_nan_duration_or_a_huge_literal_is_invalid(tmp_path, baseline_doc):
    doc = json.loads(json.dumps(baseline_doc))
    doc["results"][0]["median_s"] = float("nan")
    nan_time = tmp_path / "nan.json"
    nan_time.write_text(json.dumps(doc))
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", str(nan_time), env=env()), "results[0] has median_s nan")
    huge = tmp_path / "huge.json"  # 1e999 parses as inf
    huge.write_text(json.dumps(baseline_doc).replace('"gbps": ', '"gbps": 1e999, "was": ', 1))
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", str(huge), env=env()), "results[0] has gbps inf")


def test_baseline_nested_100k_deep_or_not_utf8_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", str(deep), env=env()), "nested too deeply")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"schema": "\xff\xfe"}')
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", str(binary), env=env()), "not UTF-8")


def test_baseline_path_of_100k_characters(tmp_path):
    one_line_exit_2(run_devctl(*BENCH_SMALL, "--baseline", LONG, env=env()), "--baseline", "100000 characters")


# ---- pyproject.toml and --config ---------------------------------------------------------------------------


def test_pyproject_not_utf8_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_bytes(b'[tool.devctl.check]\ndevice-kind = "\xff\xfe"\n')
    one_line_exit_2(run_devctl(*QUICK_CHECK, env=env(), cwd=tmp_path), "pyproject.toml", "not UTF-8")


def test_pyproject_nested_100k_deep_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    one_line_exit_2(run_devctl(*QUICK_CHECK, env=env(), cwd=tmp_path), "pyproject.toml", "nested too deeply")


def test_pyproject_fifo_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "pyproject.toml")
    one_line_exit_2(run_devctl(*QUICK_CHECK, env=env(), cwd=tmp_path, timeout=60), "pyproject.toml", "FIFO")


def test_config_path_of_100k_characters_and_other_non_files(tmp_path):
    one_line_exit_2(run_devctl(*QUICK_CHECK, "--config", LONG, env=env(), cwd=tmp_path), "--config", "100000 characters")
    one_line_exit_2(run_devctl(*QUICK_CHECK, "--config", "/dev/zero", env=env(), cwd=tmp_path), "character device")
    one_line_exit_2(run_devctl(*QUICK_CHECK, "--config", str(tmp_path), env=env(), cwd=tmp_path), "directory")
    one_line_exit_2(run_devctl(*QUICK_CHECK, "--config", "", env=env(), cwd=tmp_path), "--config is empty")


def test_config_through_a_symlink_is_followed(tmp_path):
    real = tmp_path / "real.toml"
    real.write_text("min-devices = 2\n")
    link = tmp_path / "devctl.toml"
    link.symlink_to(real)
    proc = run_devctl("check", "--only", "devices", "--config", str(link), "--json", env=env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["expectations"]["min_devices"] == 2


# ---- flag grammar ----------------------------------------------------------------------------------------


def test_rates_in_bits_and_bytes(tmp_path):
    from devctl.units import parse_rate_gbps

    assert parse_rate_gbps("10GB/s") == 10 and parse_rate_gbps("10") == 10 and parse_rate_gbps("10 GBps") == 10
    assert parse_rate_gbps("80Gb/s") == parse_rate_gbps("80Gbit/s") == parse_rate_gbps("80Gbps") == 10
    assert parse_rate_gbps("1GiB/s") == pytest.approx(1.073741824)
    assert parse_rate_gbps("500MB/s") == 0.5 and parse_rate_gbps("8Mbit/s") == 0.001
    for text in ("10G", "10gb/s", "10 furlongs", "1e3", "nan", "", "²", "9" * 5000):
        with pytest.raises(ValueError):
            parse_rate_gbps(text)
    # End to end: gigabits reach the check as gigabytes.
    proc = run_devctl("check", "--only", "bandwidth", "--min-h2d", "8Mbit/s", "--json", env=env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["expectations"]["min_h2d_gbps"] == 0.001


def test_max_regression_grammar():
    from devctl.cli.gate import parse_percent
    from devctl.errors import UsageError

    assert [parse_percent(t) for t in ("10%", "2.5%", "10", "0", "0%", "0.1%", " 5 % ")] == [10, 2.5, 10, 0, 0, 0.1, 5]
    for text in ("0.1", "0.5", "100%", "150", "-5%", "nan", "inf", "", "%", "1e1", "10%%", "²"):
        with pytest.raises(UsageError):
            parse_percent(text)


@pytest.mark.parametrize(
    "args, needles",
    [
        (("bench", "transfer", "--baseline", "/nonexistent", "--max-regression", "0.1"), ["ambiguous", "10%", "0.1%"]),
        (("check", "--only", ""), ["--only is empty"]),
        (("check", "--skip", ""), ["--skip is empty"]),
        (("check", "--only", "devices,"), ["empty entry"]),
        (("check", "--junit-xml", ""), ["--junit-xml is empty"]),
        (("check", "--min-h2d", "10G"), ["ambiguous", "10GB/s", "10Gbit/s"]),
        (("check", "--min-h2d", "10gb/s"), ["ambiguous"]),
        (("check", "--min-h2d", "10 furlongs"), ["--min-h2d", "Gb/s"]),
        (("check", "--min-devices", "²"), ["--min-devices", "'²'"]),
        (("check", "--min-devices", "9" * 5000), ["--min-devices", "5000 characters"]),
        (("check", "--min-memory", "9" * 5000), ["--min-memory", "5000 characters"]),
        (("check", "--min-memory", "1" + "0" * 30), ["--min-memory"]),
        (("check", "--timeout", ""), ["--timeout"]),
        # An expectation whose one check is left out would be silently ignored.
        (("check", "--only", "devices", "--min-h2d", "10GB/s"), ["--min-h2d", "'bandwidth'"]),
        (("check", "--skip", "memory", "--min-memory", "1G"), ["--min-memory", "'memory'"]),
        (("check", "--only", "memory", "--min-devices", "2"), ["--min-devices", "'devices'"]),
        (("list", "--timeout", ""), ["--timeout"]),
        (("list", "--platform", ""), ["--platform"]),
        (("bench", "transfer", "--timeout", "nan"), ["--timeout", "'nan'"]),
        (("bench", "transfer", "--sizes", "1" + "0" * 30), ["--sizes"]),
        (("bench", "transfer", "--direction", LONG), ["--direction", "100000 characters"]),
        (("bench", "transfer", "--sizes", LONG), ["--sizes", "100000 characters"]),
        (("check", "--min-h2d", LONG), ["--min-h2d", "100000 characters"]),
        # Values typer itself rejects, or other layers quote: the error line cuts them too.
        (("bench", "transfer", "--repeats", LONG), ["--repeats", "characters)"]),
        (("list", "--platform", LONG), ["--platform", "characters)"]),
        # One device grammar: every device flag cuts and names a hostile value the same way.
        (("memstats", "--device", LONG), ["--device", "100000 characters", "is not a device id"]),
        (("bench", "transfer", "--device", LONG), ["--device", "100000 characters", "is not a device id"]),
        (("bench", "transfer", "--src", LONG), ["--src", "100000 characters"]),
        (("memstats", "--device", "cpu:" + "0" * 5000 + "x"), ["--device", "5005 characters"]),
        (("list", "--distributed", "--num-processes", "²"), ["--num-processes", "'²'"]),
        (("check", "--distributed", "--coordinator", "h:" + "9" * 5000), ["--coordinator", "65535"]),
    ],
)
def test_hostile_flag_values_are_one_line_exit_2(tmp_path, args, needles):
    one_line_exit_2(run_devctl(*args, env=env(), cwd=tmp_path), *needles)


# ---- sizes this machine cannot hold, and the estimate behind the error --------------------------------------


def _peak_rss_bytes(*args: str) -> int:
    code = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
    )
    cmd = [sys.executable, "-c", code, sys.executable, "-m", "devctl", "bench", "transfer", "--repeats", "2", "--warmups", "1", "--min-time", "0", "--json", *args]
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


@pytest.mark.parametrize("args", [(), ("--replicated", "--direction", "d2d-self"), ("--direction", "h2d", "--no-verify")])
def test_host_memory_estimate_is_what_the_probe_really_holds(args):
    # Peak RSS grows with the size by the estimate's factor (two sizes: the interpreter and jax cancel out).
    from devctl.cli.bench_transfer import build_options
    from devctl.model.bench_transfer import host_bytes_needed

    big, small = 128 << 20, 32 << 20  # below ~32M, fixed costs (pools, threads) blur the slope
    growth = _peak_rss_bytes("--sizes", str(big), *args) - _peak_rss_bytes("--sizes", str(small), *args)
    opts = build_options(
        ["d2d-self"] if "d2d-self" in args else ["h2d"] if "h2d" in args else None, "main", None, False, None, None, None,
        "--no-verify" not in args, False, "--replicated" in args, None, None, None, False,
    )  # fmt: skip
    estimate = host_bytes_needed(opts, big - small, devices_in_host_memory=True, device_count=2)
    assert 0.85 < growth / estimate < 1.15, (growth / (big - small), estimate / (big - small))
