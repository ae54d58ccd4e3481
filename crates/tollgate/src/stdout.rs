//! A command's output on standard output, quiet when the reader has gone.

/// Writes a command's output to standard output. A reader that closed the pipe
/// (`tollgate schema | head`) has what it wanted: no panic, no message (`print!` panics
/// on `EPIPE`, and with `panic = "abort"` that was exit 134).
pub fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|()| o.flush());
}
