//! The `rtcell` command line.

#[macro_use]
mod out;
mod cli;

fn main() {
    std::process::exit(out::finish(cli::main()));
}
