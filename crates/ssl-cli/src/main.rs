//! `ssl-cli`: a thin shell over the `ssl_cli` library.

fn main() {
    std::process::exit(ssl_cli::run(std::env::args_os()));
}
