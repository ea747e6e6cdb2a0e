//! `fabric-run [options] -- CMD [ARGS...]`: the job-step wrapper (not yet built).

fn main() -> anyhow::Result<()> {
    anyhow::bail!("fabric-run is not built yet")
}
