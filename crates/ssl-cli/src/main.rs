//! `ssl-cli`: a thin shell over the `ssl_cli` library.

/// Large buffers on transparent huge pages (see `ssl_cli::alloc`).
#[global_allocator]
static ALLOC: ssl_cli::alloc::HugePageAlloc = ssl_cli::alloc::HugePageAlloc;

fn main() {
    // A reader that stops early (`ssl-cli inspect ... | head`) ends the program quietly, as it
    // ends `cat` or `grep`. Rust ignores SIGPIPE, so the next write failed instead and
    // `println!` panicked with a backtrace.
    #[cfg(target_os = "linux")]
    // SAFETY: restores the signal's default action before any other thread exists; no handler
    // of ours is replaced.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(ssl_cli::run(std::env::args_os()));
}
