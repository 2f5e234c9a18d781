//! What the author tools print on stdout, for people and pipes: a reader
//! that goes away (`plugin inspect … | head`) ends the tool quietly, with
//! exit 0, as a tool killed by SIGPIPE would have ended. SIGPIPE itself stays
//! ignored, as Rust leaves it, so that a peer closing a socket is an error
//! that names the peer.

/// `println!` for the tools' stdout.
macro_rules! outln {
    () => {
        $crate::tools::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::tools::out::line(format_args!($($arg)*))
    };
}

/// Writes one line; ends the process quietly if stdout's reader is gone.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => panic!("cannot write to stdout: {e}"),
    }
}
