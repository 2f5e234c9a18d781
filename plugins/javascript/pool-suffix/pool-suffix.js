// pool-suffix in JavaScript: appends `suffix` to the driver name, as the Rust
// example does. Built with componentize-js (see build.mjs) against
// wit/policy.wit, world driver-name-policy, with every WASI feature disabled so
// the component imports only the policy interfaces.

import { log } from 'csi-registrar:policy/host-log@0.1.1';

function suffixFrom(settingsJson) {
  const settings = JSON.parse(settingsJson || '{}');
  const suffix = settings.suffix;
  if (typeof suffix !== 'string' || suffix.length === 0) {
    throw new Error('suffix must be a non-empty string');
  }
  const bad = [...suffix].find((c) => !/[A-Za-z0-9.-]/.test(c));
  if (bad !== undefined) {
    // The same words as the Rust example: plugins/examples/pool-suffix/cases.toml checks both.
    throw new Error(`suffix ${JSON.stringify(suffix)} contains '${bad}'; use letters, digits, '-' and '.'`);
  }
  return suffix;
}

export const plugin = {
  info() {
    return { name: 'pool-suffix-js', version: '0.1.0' };
  },
  // result<_, string>: returning is ok; throwing a string is err.
  validateSettings(settingsJson) {
    try {
      suffixFrom(settingsJson);
    } catch (e) {
      throw e.message;
    }
  },
};

export const driverName = {
  // result<name-decision, policy-error>
  rewriteDriverName(ctx, current) {
    let suffix;
    try {
      suffix = suffixFrom(ctx.settingsJson);
    } catch (e) {
      throw { message: e.message };
    }
    log('info', `renaming ${current} on node ${ctx.nodeName}`);
    return { tag: 'rename', val: current + suffix };
  },
};
