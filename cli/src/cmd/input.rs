//! Opening the files a command is given, with errors that name the file, the option that named
//! it and what to do: a path that is missing, a directory, or not text is refused before any
//! reader sees it (`report --input DIR` once answered "Is a directory (os error 21)" alone).

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};

/// Checks that `path` (given with `flag`) is a readable file; `-` (stdin) passes.
fn check_file(path: &Path, flag: &str) -> anyhow::Result<()> {
    if path == Path::new("-") {
        return Ok(());
    }
    let meta = std::fs::metadata(path).with_context(|| {
        format!(
            "cannot read {} (given with {flag}); check the path",
            path.display()
        )
    })?;
    if meta.is_dir() {
        bail!(
            "{} (given with {flag}) is a directory; give the file itself",
            path.display()
        );
    }
    Ok(())
}

/// Opens `path` for reading (stdin for `-`).
pub fn open(path: &Path, flag: &str) -> anyhow::Result<Box<dyn Read>> {
    check_file(path, flag)?;
    if path == Path::new("-") {
        return Ok(Box::new(std::io::stdin().lock()));
    }
    let f = std::fs::File::open(path).with_context(|| {
        format!(
            "cannot open {} (given with {flag}); check the path and its permissions",
            path.display()
        )
    })?;
    Ok(Box::new(f))
}

/// Reads all of `path` (stdin for `-`) as text; bytes that are not UTF-8 are refused, since
/// every input the commands take is text (sacct output, TOML, JSON, nccl-tests logs).
pub fn read_text(path: &Path, flag: &str) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    open(path, flag)?
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {} (given with {flag})", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} (given with {flag}) is not text: byte {} is not UTF-8; is it the right file (not a compressed or binary one)?",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// The sacct of `jobs` and `report` (given with the hidden `--sacct`), through the one door to
/// accounting ([`fabric_core::slurm::Sacct`]): bounded by `--sacct-timeout`, with the user's
/// environment (their `SLURM_CONF` or `SLURM_CLUSTERS` choose the accounting asked).
pub fn sacct(program: &Path, timeout: std::time::Duration) -> fabric_core::slurm::Sacct {
    fabric_core::slurm::Sacct {
        program: program.to_path_buf(),
        timeout,
        inherit_env: true,
    }
}

/// A failed sacct run of `jobs` or `report` as one error that says what to do; `instead` is the
/// option that reads a saved output instead.
pub fn sacct_error(
    e: fabric_core::slurm::SlurmError,
    program: &Path,
    instead: &str,
) -> anyhow::Error {
    use fabric_base::exec::ExecError;
    use fabric_core::slurm::SlurmError;
    match e {
        SlurmError::Exec(ExecError::Spawn { source, .. }) => {
            anyhow::Error::new(source).context(format!(
                "cannot run {}; is Slurm's client installed? (or pass {instead})",
                program.display()
            ))
        }
        SlurmError::Exec(timeout @ ExecError::Timeout { .. }) => anyhow::anyhow!(
            "{timeout}; slurmdbd may be slow or unreachable: raise --sacct-timeout, ask for a shorter window, or pass {instead}"
        ),
        SlurmError::Failed { code, stderr, .. } => anyhow::anyhow!(
            "sacct failed (exit status: {code}): {stderr}; check that slurmdbd is reachable and accounting is on"
        ),
        other => other.into(),
    }
}
