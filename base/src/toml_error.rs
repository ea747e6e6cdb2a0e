//! One line for a TOML error, shared by every TOML reader of the project (the configuration,
//! the cost file, `accept`'s thresholds).

/// A TOML error as one line: where (`line 3, column 1`), what, and for an unknown key the
/// nearest known one (`did you mean `gpus`?`, [`fabric_proto::suggest::explain`]). Shared by every
/// TOML reader (this file, the cost file, `accept`'s thresholds).
pub fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let what = fabric_proto::suggest::explain(&e.message().trim().replace('\n', "; "));
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what,
    }
}
