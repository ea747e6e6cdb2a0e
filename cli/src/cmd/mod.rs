//! One module per subcommand.

pub mod accept;
pub mod bom;
pub mod check_config;
pub mod coexist;
pub mod collective;
pub mod dist;
pub mod drill;
pub mod input;
pub mod inventory;
pub mod jobs;
pub mod jobstep;
pub mod nodes;
pub mod probe;
pub mod report;
pub mod stepgate;
