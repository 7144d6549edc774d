"""The node against its system profile (gpufleet.node.profiles, docs/profiles.md): the verify
checks of family "profile" in gpufleet.node.health.check_registry: test_profile, one record
listing every field that differs from the profile (--system-profile, default auto), and
test_host_device_copy, per GPU the host<->device copy bandwidth against the profile's floor."""

from gpufleet.node.health.check_registry import suite_tests

globals().update(suite_tests("profile"))
