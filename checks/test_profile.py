"""The node against its system profile (gpufleet.node.profiles, docs/profiles.md): the verify
check of family "profile" in gpufleet.node.health.check_registry, test_profile, one record
listing every field that differs from the profile (--system-profile, default auto)."""

from gpufleet.node.health.check_registry import suite_tests

globals().update(suite_tests("profile"))
