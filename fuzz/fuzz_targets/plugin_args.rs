//! plugstack.conf: the plugin's words and whole plugstack files. Every problem says what it is
//! about; nothing panics.
#![no_main]
use fabric_proto::plugin_args::{PluginArgs, plugstack_lines};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let (_args, problems) = PluginArgs::parse(text.split_whitespace());
    for p in &problems {
        assert!(!p.to_string().is_empty(), "{p:?} has no message");
    }
    let _ = plugstack_lines(text);
});
