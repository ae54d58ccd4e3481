//! `tollgate completions SHELL` and `tollgate man`: shell completions (clap_complete) and
//! man pages (clap_mangen) generated from the command line's own definition, so they
//! list exactly the commands and flags this binary has.

use clap::CommandFactory;
use std::path::Path;
use std::process::ExitCode;

/// Prints the completion script for `shell`.
pub fn completions<C: CommandFactory>(shell: clap_complete::Shell) -> ExitCode {
    let mut cmd = C::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "tollgate", &mut out);
    crate::out(&String::from_utf8_lossy(&out));
    ExitCode::SUCCESS
}

/// Writes `tollgate.1` and a page per subcommand (`tollgate-run.1`, `tollgate-har-list.1`,
/// …) into `dir`, or prints `tollgate.1` when there is none.
pub fn man<C: CommandFactory>(dir: Option<&Path>) -> ExitCode {
    let cmd = C::command();
    let written = match dir {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| clap_mangen::generate_to(cmd, dir))
            .map_err(|e| format!("cannot write the man pages to {}: {e}", dir.display())),
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .map(|()| crate::out(&String::from_utf8_lossy(&out)))
                .map_err(|e| e.to_string())
        }
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
