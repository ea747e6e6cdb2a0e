//! What `fabric-check` says about what it did: `tracing` events on stderr, one compact line each.
//!
//! The SPANK plugin relays every line its child prints into the slurmd log, which stamps its own
//! time, so lines carry no timestamp and no colour: `INFO prolog{job=42 node=n1}: probe: pass
//! remaining_ms=7412`. Stdout stays for documents (probe JSON, reports) and the job step's
//! decision line.
//!
//! The lines the job step relays into the slurmd log are events of
//! `fabric_core::jobstep::RELAY_TARGET`: they go to stdout bare, exactly as the plugin expects,
//! at every level, and the decision line is the last of them.
//!
//! The level is `info`, moved by `-v` (debug, then trace) and `-q` (warn, then error);
//! `FABRIC_CHECK_LOG` (an `EnvFilter` directive such as `fabric_net::rendezvous=debug`) takes
//! precedence when set. The plugin scrubs its child's environment, so there only the flags count.

use fabric_core::jobstep::RELAY_TARGET;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, fmt};

/// The environment variable whose `EnvFilter` directive replaces the flags' level.
pub const LOG_ENV: &str = "FABRIC_CHECK_LOG";

/// The level `-v` and `-q` (counted) give: `info` with neither.
pub fn level(verbose: u8, quiet: u8) -> tracing::Level {
    match i16::from(verbose) - i16::from(quiet) {
        i16::MIN..=-2 => tracing::Level::ERROR,
        -1 => tracing::Level::WARN,
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
}

/// Installs the subscriber: relayed lines ([`RELAY_TARGET`]) bare on stdout whatever the level,
/// everything else compact on stderr at the chosen level. A second call is a no-op.
pub fn init(verbose: u8, quiet: u8) {
    let filter = std::env::var(LOG_ENV)
        .ok()
        .and_then(|d| EnvFilter::try_new(d).ok())
        .unwrap_or_else(|| EnvFilter::new(level(verbose, quiet).as_str()));
    let relayed = |m: &tracing::Metadata<'_>| m.target() == RELAY_TARGET;
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .without_time()
        .with_ansi(false)
        .with_target(false)
        .compact()
        .with_filter(filter)
        .with_filter(filter_fn(move |m| !relayed(m)));
    let stdout = fmt::layer()
        .with_writer(std::io::stdout)
        .event_format(Bare)
        .with_ansi(false)
        .with_filter(filter_fn(move |m| relayed(m) && m.is_event()));
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(stdout)
        .try_init();
}

/// A relayed line as it was said: the message alone, no level, span or time.
struct Bare;

impl<S, N> fmt::FormatEvent<S, N> for Bare
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &fmt::FmtContext<'_, S, N>,
        mut writer: fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v_raises_and_each_q_lowers_the_level_from_info() {
        assert_eq!(level(0, 0), tracing::Level::INFO);
        assert_eq!(level(1, 0), tracing::Level::DEBUG);
        assert_eq!(level(3, 0), tracing::Level::TRACE);
        assert_eq!(level(0, 1), tracing::Level::WARN);
        assert_eq!(level(0, 5), tracing::Level::ERROR);
        assert_eq!(level(1, 1), tracing::Level::INFO, "they cancel out");
    }
}
