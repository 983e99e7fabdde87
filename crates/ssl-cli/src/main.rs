//! `ssl-cli`: a thin shell over the `ssl_cli` library.

/// Large buffers on transparent huge pages (see `ssl_cli::alloc`).
#[global_allocator]
static ALLOC: ssl_cli::alloc::HugePageAlloc = ssl_cli::alloc::HugePageAlloc;

fn main() {
    std::process::exit(ssl_cli::run(std::env::args_os()));
}
