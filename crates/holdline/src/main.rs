//! `holdline`: the command-line entry point.
//!
//! A thin `main` over the libraries. Subcommands that are not built yet say so and exit
//! with status 2, so scripts can tell "not available" from "failed".

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A SIP proxy and registrar that keeps carrying calls at full capacity under overload, and the
/// lab that proves it.
#[derive(Debug, Parser)]
#[command(name = "holdline", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the SIP proxy and registrar.
    Serve(Rest),
    /// Generate SIP load or answer calls (uac, uas, register, pair).
    Load(Rest),
    /// Compare holdline with Kamailio: capacity, cost per call, overload curves.
    Bench(Rest),
    /// Run a named experiment of the lab.
    Lab(Rest),
    /// Run the discrete-event simulator.
    Sim(Rest),
    /// Run the user-space network emulator.
    Netem(Rest),
}

/// Arguments of a subcommand that is not built yet.
#[derive(Debug, clap::Args)]
struct Rest {
    /// Arguments for the subcommand.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn not_yet(name: &str) -> ExitCode {
    eprintln!("holdline {name}: not yet available in this build");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(_) => not_yet("serve"),
        Command::Load(_) => not_yet("load"),
        Command::Bench(_) => not_yet("bench"),
        Command::Lab(_) => not_yet("lab"),
        Command::Sim(_) => not_yet("sim"),
        Command::Netem(_) => not_yet("netem"),
    }
}
