"""pool-suffix in Python: appends `suffix` to the driver name, as the Rust example does.

Built with componentize-py (see build.sh) against wit/policy.wit, world
driver-name-policy. `--stub-wasi` leaves only the policy interfaces as imports.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.driver_name import NameDecision, NameDecision_Rename
from wit_world.exports.plugin import PluginInfo
from wit_world.imports.host_log import Level, log
from wit_world.imports.types import PolicyError, RegistrationContext

ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.")


def suffix_from(settings_json: str) -> str:
    settings = json.loads(settings_json or "{}")
    suffix = settings.get("suffix")
    if not isinstance(suffix, str) or not suffix:
        raise ValueError("suffix must be a non-empty string")
    for c in suffix:
        if c not in ALLOWED:
            # The same words as the Rust example: plugins/examples/pool-suffix/cases.toml checks both.
            raise ValueError(f"suffix {json.dumps(suffix)} contains '{c}'; use letters, digits, '-' and '.'")
    return suffix


class Plugin(exports.Plugin):
    def info(self) -> PluginInfo:
        return PluginInfo(name="pool-suffix-py", version="0.1.0")

    def validate_settings(self, settings_json: str) -> None:
        try:
            suffix_from(settings_json)
        except ValueError as e:
            raise Err(str(e))


class DriverName(exports.DriverName):
    def rewrite_driver_name(self, ctx: RegistrationContext, current: str) -> NameDecision:
        try:
            suffix = suffix_from(ctx.settings_json)
        except ValueError as e:
            raise Err(PolicyError(message=str(e)))
        log(Level.INFO, f"renaming {current} on node {ctx.node_name}")
        return NameDecision_Rename(current + suffix)
