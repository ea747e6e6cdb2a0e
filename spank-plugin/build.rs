//! Generates the SPANK bindings from the installed `slurm/spank.h`, so that the exported
//! `plugin_version` is the `SLURM_VERSION_NUMBER` of the Slurm this plugin is built against
//! (Slurm refuses a SPANK plugin whose major.minor differs from its own).

use std::env;
use std::path::PathBuf;

const CANDIDATES: &[&str] = &["/usr/include", "/usr/local/include", "/opt/slurm/include"];

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let dirs: Vec<PathBuf> = match env::var_os("SLURM_INCLUDE_DIR") {
        Some(d) => vec![PathBuf::from(d)],
        None => CANDIDATES.iter().map(PathBuf::from).collect(),
    };
    let Some(include) = dirs.iter().find(|d| d.join("slurm/spank.h").is_file()) else {
        eprintln!(
            "error: cannot find slurm/spank.h in {dirs:?}.\n\
             Install Slurm's development headers (Debian/Ubuntu: `apt-get install libslurm-dev`; \
             RHEL/Rocky: `dnf install slurm-devel`) or set SLURM_INCLUDE_DIR to the directory \
             that holds slurm/spank.h of the Slurm you run."
        );
        std::process::exit(1);
    };
    for h in ["spank.h", "slurm_version.h", "slurm_errno.h"] {
        println!(
            "cargo:rerun-if-changed={}",
            include.join("slurm").join(h).display()
        );
    }
    let bindings = bindgen::Builder::default()
        .header_contents("fabric_spank_wrapper.h", "#include <slurm/spank.h>\n")
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_function(
            "spank_option_register|spank_option_getopt|spank_get_item|spank_setenv|spank_unsetenv|spank_getenv",
        )
        .allowlist_function("spank_context|slurm_info|slurm_error|slurm_verbose|slurm_debug")
        .allowlist_type("spank_option|spank_item|spank_context|spank_err_t|spank_t")
        .allowlist_var("SLURM_VERSION_NUMBER|SLURM_VERSION_STRING|ESPANK_SUCCESS")
        .rustified_enum("spank_context")
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!(
                "error: bindgen could not parse slurm/spank.h: {e}; is libclang-dev installed?"
            );
            std::process::exit(1);
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("spank_bindings.rs"))
        .expect("write bindings into OUT_DIR");
}
