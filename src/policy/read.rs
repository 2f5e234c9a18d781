//! Reading the files a policy names: regular files of a bounded size only.

/// The most a policy file may hold.
pub(crate) const MAX_POLICY_FILE: u64 = 1 << 20;

/// Reads a file that must be a regular file of at most `max` bytes. Opening
/// does not block on a FIFO (`O_NONBLOCK`), and the type is checked on the
/// opened file, so nothing but a regular file is ever read, and never more
/// than `max` bytes of it (`/dev/zero` is refused, not read until memory runs out).
pub(crate) fn read_regular_file(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let kind = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_dir() {
            "a directory"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {kind}, not a regular file"),
        ));
    }
    if meta.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {} bytes, more than the {max} allowed", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it grew past the {max} bytes allowed while being read"),
        ));
    }
    Ok(bytes)
}
