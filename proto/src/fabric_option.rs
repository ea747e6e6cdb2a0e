//! The value of the user's `--fabric-check[=quick|full|off]` option.
//!
//! The same parser runs in srun/sbatch/salloc (to refuse a bad value at submission) and in the
//! job prolog (to decide what to run), so both sides agree on what a value means.

use std::fmt;
use std::str::FromStr;

/// What the user asked for with `--fabric-check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FabricMode {
    /// Passive node-local probe only (the default when the flag has no value).
    Quick,
    /// Passive probe plus the active cross-node collective.
    Full,
    /// Explicitly no check, even where the admin's policy is opt-out.
    Off,
}

/// Every value accepted by `--fabric-check=`, for help and error texts.
pub const VALID_VALUES: &str = "quick, full or off";

/// An option value that is not one of [`VALID_VALUES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --fabric-check value {value:?}: use {VALID_VALUES} (or the bare flag for quick)")]
pub struct InvalidFabricMode {
    /// The refused value, bounded to 64 characters.
    pub value: String,
}

impl FabricMode {
    /// Parses an option argument as Slurm hands it over.
    ///
    /// `None`, the empty string and Slurm's `"(null)"` (how a bare flag reaches the prolog) all
    /// mean the bare flag, i.e. [`FabricMode::Quick`]. Matching ignores ASCII case and
    /// surrounding whitespace.
    pub fn from_optarg(optarg: Option<&str>) -> Result<Self, InvalidFabricMode> {
        match optarg.map(str::trim) {
            None | Some("") | Some("(null)") => Ok(Self::Quick),
            Some(v) => v.parse(),
        }
    }

    /// The canonical lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Quick => "quick",
            Self::Full => "full",
            Self::Off => "off",
        }
    }
}

impl FromStr for FabricMode {
    type Err = InvalidFabricMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "quick" => Ok(Self::Quick),
            "full" => Ok(Self::Full),
            "off" => Ok(Self::Off),
            _ => Err(InvalidFabricMode {
                value: s.chars().take(64).collect(),
            }),
        }
    }
}

impl fmt::Display for FabricMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_flag_means_quick_in_every_form_slurm_delivers_it() {
        for raw in [None, Some(""), Some("(null)"), Some("  ")] {
            assert_eq!(
                FabricMode::from_optarg(raw),
                Ok(FabricMode::Quick),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn named_values_parse_case_insensitively() {
        assert_eq!(FabricMode::from_optarg(Some("FULL")), Ok(FabricMode::Full));
        assert_eq!(FabricMode::from_optarg(Some(" off ")), Ok(FabricMode::Off));
        assert_eq!(
            FabricMode::from_optarg(Some("quick")),
            Ok(FabricMode::Quick)
        );
    }

    #[test]
    fn a_bogus_value_is_refused_with_the_valid_values_named() {
        let err = FabricMode::from_optarg(Some("bogus")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("\"bogus\""), "{msg}");
        assert!(msg.contains("quick, full or off"), "{msg}");
    }

    #[test]
    fn a_huge_bogus_value_is_bounded_in_the_error() {
        let long = "x".repeat(10_000);
        let err = FabricMode::from_optarg(Some(&long)).unwrap_err();
        assert_eq!(err.value.len(), 64);
    }
}
