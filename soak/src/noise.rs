//! The benign noise the soak draws, each kind with its rate, its size and where they come from
//! (docs/checks.md, "False drains: the soak", says the same in prose; a test keeps the names
//! in step).

/// One kind of benign noise (or a control fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A healthy link's occasional symbol errors (Poisson at the port's effective BER).
    SymbolErrors,
    /// A short burst of symbol errors on a healthy link.
    SymbolBurst,
    /// Traffic counters rising with the jobs' load (`port_xmit_data`, `port_xmit_wait`).
    BackgroundLoad,
    /// A checkpoint: pause frames and CNPs on the storage NICs, `port_xmit_wait` on the fabric.
    CheckpointBurst,
    /// A maintenance reboot: counters reset, links retrain, the clock comes up off and is
    /// stepped by NTP, `slurmd` runs the health check at its start.
    Reboot,
    /// The boot-time health check ran while some ports were still training.
    BootRace,
    /// A driver reload (`openibd restart`): counters reset, links retrain.
    DriverReload,
    /// Counters found stuck at the maximum of their width (a long-lived port).
    Saturation,
    /// `slurmctld` restarted: every Slurm call fails for a while.
    ControllerRestart,
    /// The node's clock stepped (NTP), forward or back.
    ClockStep,
    /// A firmware reset window (`mlxfwreset`, mlx5's devlink health recovery): one HCA's files
    /// fail to read for seconds.
    FirmwareReset,
    /// One sysfs file failed to read once (a transient `EIO`).
    ReadError,
    /// Port counters cleared by hand or by a monitoring agent (`perfquery -R`), jobs running.
    CounterReset,
    /// A 32-bit hardware counter (mlx5's Q counters) wrapped past 2^32.
    CounterWrap,
    /// A PAM4 link's background symbol errors at a healthy (post-FEC) symbol BER.
    Pam4Background,
    /// A port never ACTIVE (the storage card's second port, no cable), there at the first probe.
    UnprovisionedPort,
    /// A management NIC whose error counters move all day.
    ManagementNoise,
    /// A storage card of another kind (Gen5-capable ConnectX-7) in a slot wired for Gen4.
    Gen4Slot,
}

impl Kind {
    /// Every kind, in the table's order.
    pub const ALL: [Kind; 18] = [
        Kind::SymbolErrors,
        Kind::SymbolBurst,
        Kind::BackgroundLoad,
        Kind::CheckpointBurst,
        Kind::Reboot,
        Kind::BootRace,
        Kind::DriverReload,
        Kind::Saturation,
        Kind::ControllerRestart,
        Kind::ClockStep,
        Kind::FirmwareReset,
        Kind::ReadError,
        Kind::CounterReset,
        Kind::CounterWrap,
        Kind::Pam4Background,
        Kind::UnprovisionedPort,
        Kind::ManagementNoise,
        Kind::Gen4Slot,
    ];

    /// The name in the table and the docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SymbolErrors => "symbol_errors",
            Kind::SymbolBurst => "symbol_burst",
            Kind::BackgroundLoad => "background_load",
            Kind::CheckpointBurst => "checkpoint_burst",
            Kind::Reboot => "reboot",
            Kind::BootRace => "boot_race",
            Kind::DriverReload => "driver_reload",
            Kind::Saturation => "saturation",
            Kind::ControllerRestart => "slurmctld_restart",
            Kind::ClockStep => "clock_step",
            Kind::FirmwareReset => "firmware_reset",
            Kind::ReadError => "read_error",
            Kind::CounterReset => "counter_reset",
            Kind::CounterWrap => "counter_wrap",
            Kind::Pam4Background => "pam4_background",
            Kind::UnprovisionedPort => "unprovisioned_port",
            Kind::ManagementNoise => "management_noise",
            Kind::Gen4Slot => "gen4_slot",
        }
    }
}

/// The model's numbers. Every rate is per node-day unless its name says otherwise.
#[derive(Debug, Clone)]
pub struct Model {
    /// Effective (post-FEC) bit error rate of a healthy port, drawn log-uniform per port
    /// between these.
    pub ber_range: (f64, f64),
    /// Link utilisation while a job runs (uniform) and while idle.
    pub util_job: (f64, f64),
    /// Link utilisation of an idle node.
    pub util_idle: f64,
    /// Symbol-error bursts per port-day, and their size range (log-uniform).
    pub bursts_per_port_day: f64,
    /// Burst sizes.
    pub burst_size: (f64, f64),
    /// Checkpoints per job-hour.
    pub checkpoints_per_job_hour: f64,
    /// Pause frames (and CNPs) one checkpoint causes per storage NIC (log-uniform).
    pub checkpoint_pauses: (f64, f64),
    /// Maintenance reboots per node-day.
    pub reboots_per_day: f64,
    /// Whether the health check at `slurmd`'s start can see ports still training (off: every
    /// port is ACTIVE by then, as with a boot that waits for the fabric).
    pub boot_race: bool,
    /// When the boot-time health check runs after the driver loads, seconds (uniform).
    pub boot_health_at_s: (f64, f64),
    /// When each port is ACTIVE after the driver loads (training, then the subnet manager's
    /// sweep), seconds (uniform).
    pub port_active_at_s: (f64, f64),
    /// The clock's error at boot before NTP steps it, seconds (uniform, either sign).
    pub boot_clock_error_s: f64,
    /// Driver reloads per node-day.
    pub reloads_per_day: f64,
    /// The chance that a periodic health check lands in a reload's retraining window (window /
    /// `HealthCheckInterval`).
    pub reload_race: f64,
    /// The share of nodes found with saturated counters when the soak starts.
    pub saturated_nodes: f64,
    /// `slurmctld` restarts per cluster-day.
    pub controller_restarts_per_day: f64,
    /// NTP clock steps per node-day, and their size range in seconds (log-uniform, either sign).
    pub clock_steps_per_day: f64,
    /// Clock step sizes.
    pub clock_step_s: (f64, f64),
    /// How long a driver reload leaves `class/infiniband` empty, seconds (log-uniform).
    pub reload_gone_s: (f64, f64),
    /// Firmware reset windows per node-day, and how long one HCA's files fail, seconds.
    pub fw_resets_per_day: f64,
    /// Firmware reset window lengths.
    pub fw_reset_s: (f64, f64),
    /// Single-file read errors per node-day, and how long the file fails, seconds.
    pub read_errors_per_day: f64,
    /// Read error lengths.
    pub read_error_s: (f64, f64),
    /// Counter clears per node-day.
    pub counter_resets_per_day: f64,
    /// 32-bit counter wraps per node-day.
    pub wraps_per_day: f64,
    /// The share of ports with a PAM4 background, and its symbol BER range (log-uniform).
    pub pam4_ports: f64,
    /// PAM4 background symbol BERs.
    pub pam4_ber: (f64, f64),
    /// The share of nodes whose storage card's second port has no cable.
    pub unprovisioned_nodes: f64,
    /// The share of nodes whose second storage port is a noisy management NIC.
    pub management_nodes: f64,
    /// The share of nodes with a Gen5 storage card in a Gen4 slot.
    pub gen4_slot_nodes: f64,
}

impl Default for Model {
    fn default() -> Self {
        Self {
            ber_range: (1e-18, 1e-14),
            util_job: (0.3, 0.9),
            util_idle: 0.02,
            bursts_per_port_day: 1.0 / 30.0,
            burst_size: (1.0, 120.0),
            checkpoints_per_job_hour: 1.5,
            checkpoint_pauses: (1e3, 3e5),
            reboots_per_day: 1.0 / 30.0,
            boot_race: true,
            boot_health_at_s: (10.0, 120.0),
            port_active_at_s: (15.0, 90.0),
            boot_clock_error_s: 120.0,
            reloads_per_day: 1.0 / 90.0,
            reload_race: 0.2,
            saturated_nodes: 0.05,
            controller_restarts_per_day: 1.0 / 30.0,
            clock_steps_per_day: 1.0 / 50.0,
            clock_step_s: (0.001, 2.0),
            reload_gone_s: (0.3, 20.0),
            fw_resets_per_day: 1.0 / 60.0,
            fw_reset_s: (0.5, 10.0),
            read_errors_per_day: 0.2,
            read_error_s: (0.05, 2.0),
            counter_resets_per_day: 1.0 / 20.0,
            wraps_per_day: 1.0 / 10.0,
            pam4_ports: 0.3,
            pam4_ber: (1e-15, 3e-14),
            unprovisioned_nodes: 0.1,
            management_nodes: 0.2,
            gen4_slot_nodes: 0.1,
        }
    }
}
