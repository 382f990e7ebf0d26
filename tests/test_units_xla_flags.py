"""XLA_FLAGS as XLA's own parser judges it, read from what it prints before it ends the process (devctl.model.xla_flags):
the real lines of jaxlib 0.10.2 and 0.12 (glog) and of jaxlib 0.4.36 (its XLA aborts)."""

from __future__ import annotations

import pytest

from devctl.model.xla_flags import fatal_message, refused_flags, without, xla_flags_failure

NEW_UNKNOWN = "F1127 14:33:09.495308   14840 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: --xla_no_such_flag=1"
NEW_VALUE = (
    "E1127 14:33:09.929229   14845 command_line_flags.cc:93] Couldn't interpret value maybe for flag xla_cpu_enable_fast_math.\n"
    "F1127 14:33:09.929271   14845 parse_flags_from_env.cc:220] Check failed: tsl::Flags::Parse(&env_argv->argc, "
    "env_argv->argv.data(), flag_list) Flag parsing failed.\nusage: --xla_cpu_enable_fast_math=maybe\nFlags:\n"
)
OLD_VALUE = (
    "2026-11-27 15:45:22.408702: E external/xla/xla/tsl/util/command_line_flags.cc:55] Couldn't interpret value abc for flag "
    "xla_force_host_platform_device_count.\n2026-11-27 15:45:22.408902: F external/xla/xla/parse_flags_from_env.cc:212] "
    "Check failed: tsl::Flags::Parse(&env_argv->argc, env_argv->argv.data(), flag_list) Flag parsing failed.\n"
)


@pytest.mark.parametrize(
    "log, said",
    [
        (NEW_UNKNOWN, "Unknown flag in XLA_FLAGS: --xla_no_such_flag=1"),
        (NEW_VALUE, "Couldn't interpret value maybe for flag xla_cpu_enable_fast_math"),
        (OLD_VALUE, "Couldn't interpret value abc for flag xla_force_host_platform_device_count"),
    ],
)
def test_xla_s_words_for_a_refused_flag(log, said):
    assert xla_flags_failure(log) == said and fatal_message(log) == said


def test_a_fatal_line_that_is_not_about_flags_is_still_said():
    assert xla_flags_failure("F1127 00:00:00.000000  1 foo.cc:1] out of cheese") is None
    assert fatal_message("F1127 00:00:00.000000  1 foo.cc:1] out of cheese") == "out of cheese"
    assert fatal_message("2026-11-27 15:45:22.408902: F external/xla/foo.cc:1] out of cheese") == "out of cheese"
    assert fatal_message("nothing fatal here") is None


def test_the_fix_keeps_every_flag_xla_takes():
    value = "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=abc  --xla_dump_to=/tmp/d"
    said = xla_flags_failure(OLD_VALUE)
    assert refused_flags(said, value) == ["--xla_force_host_platform_device_count=abc"]
    assert without(value, refused_flags(said, value)) == "--xla_cpu_enable_fast_math=false --xla_dump_to=/tmp/d"
    assert refused_flags("Unknown flag in XLA_FLAGS: --xla_no_such_flag=1", "--xla_no_such_flag=1") == ["--xla_no_such_flag=1"]
    assert without("--xla_no_such_flag=1", ["--xla_no_such_flag=1"]) is None  # nothing left: unset it
