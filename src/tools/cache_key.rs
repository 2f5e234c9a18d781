//! `plugin cache-key`: a new random key for `policy.cache_key_file`.

pub(super) fn run() -> anyhow::Result<()> {
    outln!("{}", crate::policy::wasm::cache::CacheKey::generate()?);
    Ok(())
}
