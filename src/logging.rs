//! Logs as Kubernetes components write them (k8s.io/component-base), on stderr:
//! klog's text format by default, component-base's JSON schema with
//! `--logging-format=json`, and klog's verbosity (`-v`, `--vmodule`).
//!
//! Events carry their klog verbosity in a `v` field (`tracing::info!(v = 2,
//! ...)`); `debug!` counts as 4 and `trace!` as 5. A field named `error` is
//! written as klog's `err`. Every value is quoted and escaped, so one event is
//! always one line, whatever text (a plugin's, a kubelet's) it carries.
//!
//! Text: `I1202 21:43:05.829340   17574 app.rs:145] "Version" version="v0.1.0"`
//! (severity, MMDD, time with microseconds in UTC, process id, `file:line]`,
//! the quoted message, `key="value"` pairs).
//!
//! JSON: `{"ts":1796249434347.2197,"caller":"src/app.rs:145","msg":"Version","v":0,"version":"v0.1.0"}`
//! (`ts` epoch milliseconds, `v` on info lines, `err` on error lines, then the pairs).

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// Targets whose events are the registrar's own story: the crate and the plugins' `host-log`.
const OWN: &[&str] = &["csi_node_driver_registrar", "plugin"];

/// klog's `-v` and `--vmodule`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Verbosity {
    pub v: u8,
    /// `pattern=N`: files whose name without `.rs` matches `pattern` (`*` and
    /// `?` as globs) log up to `N` instead.
    pub vmodule: Vec<(String, u8)>,
}

impl Verbosity {
    pub(crate) fn new(v: u8) -> Self {
        Verbosity {
            v,
            vmodule: Vec::new(),
        }
    }

    /// Parses `--vmodule`: `pattern=N,...` (klog's syntax; empty is none).
    pub(crate) fn parse_vmodule(spec: &str) -> Result<Vec<(String, u8)>, String> {
        spec.split(',')
            .filter(|s| !s.is_empty())
            .map(|item| {
                let (pattern, level) = item.split_once('=').ok_or_else(|| {
                    format!("expect comma-separated list of pattern=N, got {item:?}")
                })?;
                if pattern.is_empty() {
                    return Err(format!("empty pattern in {item:?}"));
                }
                let level = level
                    .parse::<u8>()
                    .map_err(|_| format!("invalid verbosity level in {item:?}"))?;
                Ok((pattern.to_owned(), level))
            })
            .collect()
    }

    /// The verbosity in force for events from `file`.
    fn for_file(&self, file: Option<&str>) -> u8 {
        let Some(file) = file else { return self.v };
        let stem = file
            .rsplit('/')
            .next()
            .unwrap_or(file)
            .trim_end_matches(".rs");
        self.vmodule
            .iter()
            .find(|(pattern, _)| {
                if pattern.contains('/') {
                    glob(pattern, file.trim_end_matches(".rs"))
                } else {
                    glob(pattern, stem)
                }
            })
            .map_or(self.v, |(_, level)| *level)
    }
}

/// `*` and `?` globbing, as klog's vmodule (filepath.Match) does for plain names.
fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some((b'*', rest)) => (0..=t.len()).any(|i| go(rest, &t[i..])),
            Some((b'?', rest)) => !t.is_empty() && go(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

/// The verbosity of an event: its `v` field, or 4 for debug and 5 for trace.
fn event_v(event: &Event<'_>) -> u8 {
    struct V(Option<u64>);
    impl Visit for V {
        fn record_u64(&mut self, field: &Field, value: u64) {
            if field.name() == "v" {
                self.0 = Some(value);
            }
        }
        fn record_i64(&mut self, field: &Field, value: i64) {
            if field.name() == "v" {
                self.0 = u64::try_from(value).ok();
            }
        }
        fn record_debug(&mut self, _: &Field, _: &dyn fmt::Debug) {}
    }
    let mut v = V(None);
    event.record(&mut v);
    let default = match *event.metadata().level() {
        Level::TRACE => 5,
        Level::DEBUG => 4,
        _ => 0,
    };
    v.0.map_or(default, |v| u8::try_from(v).unwrap_or(u8::MAX))
}

fn is_own(target: &str) -> bool {
    OWN.iter()
        .any(|own| target == *own || target.starts_with(&format!("{own}::")))
}

/// klog's verbosity for the registrar's own events; dependencies log warnings
/// and errors, and their debug output from `-v=5` on.
struct VerbosityFilter(Verbosity);

impl<S> Filter<S> for VerbosityFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        if !is_own(meta.target()) {
            return *meta.level() <= Level::WARN
                || (self.max() >= 5 && *meta.level() <= Level::DEBUG);
        }
        // The exact verbosity (a `v` field, a vmodule entry) is decided per event.
        *meta.level() <= Level::INFO || self.max() >= 4
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        let meta = event.metadata();
        if !is_own(meta.target()) || *meta.level() <= Level::WARN {
            return true;
        }
        event_v(event) <= self.0.for_file(meta.file())
    }
}

impl VerbosityFilter {
    fn max(&self) -> u8 {
        self.0
            .vmodule
            .iter()
            .map(|(_, l)| *l)
            .max()
            .unwrap_or(0)
            .max(self.0.v)
    }
}

/// The message and the key/value pairs of one event, values as klog writes them.
#[derive(Default)]
struct Fields {
    message: String,
    err: Option<String>,
    pairs: Vec<(&'static str, Value)>,
}

enum Value {
    /// Quoted and escaped in text, a JSON string.
    Text(String),
    /// Written bare (numbers, booleans).
    Bare(String),
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.text(field, format!("{value:?}"));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.text(field, value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.bare(field, value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.bare(field, value.to_string());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.bare(field, value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.bare(field, value.to_string());
    }
}

impl Fields {
    fn of(event: &Event<'_>) -> Self {
        let mut fields = Fields::default();
        event.record(&mut fields);
        fields
    }

    fn text(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = value,
            "error" | "err" => self.err = Some(value),
            name => self.pairs.push((name, Value::Text(value))),
        }
    }

    fn bare(&mut self, field: &Field, value: String) {
        match field.name() {
            "v" => {}
            "message" => self.message = value,
            name => self.pairs.push((name, Value::Bare(value))),
        }
    }
}

/// Go's `strconv.Quote`, as klog quotes messages and values: `"`, `\` and
/// control characters escaped, so nothing a value holds can start a new line.
fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `(days since the epoch) -> (month, day)`, and the time of day, in UTC.
fn civil(now: SystemTime) -> (u32, u32, u64, u32) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = (secs / 86_400) as i64;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (month, day, secs % 86_400, since.subsec_micros())
}

/// A one-line-per-event format: [`KLOG_TEXT`] or [`COMPONENT_BASE_JSON`].
#[derive(Clone, Copy)]
pub(crate) struct LineFormat(fn(SystemTime, &Event<'_>) -> String);

/// klog's text format.
pub(crate) const KLOG_TEXT: LineFormat = LineFormat(klog_line);
/// component-base's JSON schema.
pub(crate) const COMPONENT_BASE_JSON: LineFormat = LineFormat(json_line);

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writer.write_str(&(self.0)(SystemTime::now(), event))
    }
}

fn klog_line(now: SystemTime, event: &Event<'_>) -> String {
    let meta = event.metadata();
    let severity = match *meta.level() {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    };
    let (month, day, tod, micros) = civil(now);
    let file = meta
        .file()
        .map_or("???", |f| f.rsplit('/').next().unwrap_or(f));
    let mut out = format!(
        "{severity}{month:02}{day:02} {:02}:{:02}:{:02}.{micros:06} {:>7} {file}:{}] ",
        tod / 3600,
        tod / 60 % 60,
        tod % 60,
        std::process::id(),
        meta.line().unwrap_or(0),
    );
    let fields = Fields::of(event);
    quote(&fields.message, &mut out);
    if let Some(err) = &fields.err {
        out.push_str(" err=");
        quote(err, &mut out);
    }
    for (key, value) in &fields.pairs {
        out.push(' ');
        out.push_str(key);
        out.push('=');
        match value {
            Value::Text(t) => quote(t, &mut out),
            Value::Bare(b) => out.push_str(b),
        }
    }
    out.push('\n');
    out
}

fn json_line(now: SystemTime, event: &Event<'_>) -> String {
    let meta = event.metadata();
    let fields = Fields::of(event);
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let json = |v: &serde_json::Value| v.to_string();
    let string = |s: &str| json(&serde_json::Value::String(s.to_owned()));
    // component-base's order: ts, caller, msg, v (info) or err (error), the pairs.
    let mut line = format!(
        "{{\"ts\":{}",
        json(&serde_json::json!(since.as_secs_f64() * 1000.0))
    );
    if let Some(file) = meta.file() {
        // The last directory and the file, as zap's short caller.
        let mut parts = file.rsplitn(3, '/');
        let name = parts.next().unwrap_or(file);
        let caller = match parts.next() {
            Some(dir) => format!("{dir}/{name}:{}", meta.line().unwrap_or(0)),
            None => format!("{name}:{}", meta.line().unwrap_or(0)),
        };
        let _ = write!(line, ",\"caller\":{}", string(&caller));
    }
    let _ = write!(line, ",\"msg\":{}", string(&fields.message));
    if *meta.level() != Level::ERROR {
        let _ = write!(line, ",\"v\":{}", event_v(event));
    }
    if let Some(err) = &fields.err {
        let _ = write!(line, ",\"err\":{}", string(err));
    }
    for (key, value) in &fields.pairs {
        let value = match value {
            Value::Text(t) => string(t),
            Value::Bare(b) => b.clone(),
        };
        let _ = write!(line, ",{}:{value}", string(key));
    }
    line.push_str("}\n");
    line
}

/// Installs the global subscriber: `json` selects `--logging-format=json`.
pub(crate) fn init(verbosity: Verbosity, json: bool) {
    install(verbosity, json, false);
}

/// For the demo and the plugin tools, whose own output is on stdout: warnings,
/// and the plugins' own log lines; `-v` brings the registrar's log back.
pub(crate) fn init_tools(v: u8) {
    install(Verbosity::new(v), false, v == 0);
}

fn install(verbosity: Verbosity, json: bool, quiet: bool) {
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let layer = fmt.event_format(if json { COMPONENT_BASE_JSON } else { KLOG_TEXT });
    let filter = VerbosityFilter(verbosity);
    if quiet {
        let quiet = tracing_subscriber::filter::filter_fn(|meta| {
            *meta.level() <= Level::WARN || meta.target() == "plugin"
        });
        tracing_subscriber::registry()
            .with(layer.with_filter(filter).with_filter(quiet))
            .init();
    } else {
        tracing_subscriber::registry()
            .with(layer.with_filter(filter))
            .init();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Captures what the formatter writes, with the given verbosity.
    fn capture(verbosity: Verbosity, json: bool, f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = {
            let buf = buf.clone();
            move || buf.clone()
        };
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(false);
        let layer = fmt.event_format(if json { COMPONENT_BASE_JSON } else { KLOG_TEXT });
        let subscriber =
            tracing_subscriber::registry().with(layer.with_filter(VerbosityFilter(verbosity)));
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn klog_text_lines() {
        let out = capture(Verbosity::new(0), false, || {
            tracing::info!(version = "v0.1.0", "Version");
            tracing::error!(
                error = "boom\nI0101 00:00:00.000000 1 forged.go:1] \"owned\"",
                socketPath = "/r/x-reg.sock",
                "Failed to listen on socket"
            );
            tracing::warn!(count = 3_u64, ok = true, "careful");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let pid = std::process::id();
        let head = |l: &str| l[..l.find("] ").unwrap() + 2].to_owned();
        assert!(lines[0].starts_with('I'), "{}", lines[0]);
        assert!(
            head(lines[0]).contains(&format!(" {pid:>7} logging.rs:")),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].ends_with("] \"Version\" version=\"v0.1.0\""),
            "{}",
            lines[0]
        );
        assert!(lines[1].starts_with('E'));
        assert!(
            lines[1].ends_with(
                "] \"Failed to listen on socket\" err=\"boom\\nI0101 00:00:00.000000 1 forged.go:1] \\\"owned\\\"\" socketPath=\"/r/x-reg.sock\""
            ),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with('W'));
        assert!(
            lines[2].ends_with("] \"careful\" count=3 ok=true"),
            "{}",
            lines[2]
        );
        // MMDD hh:mm:ss.uuuuuu
        let b = lines[0].as_bytes();
        assert!(
            b[1..5].iter().all(u8::is_ascii_digit) && b[5] == b' ' && b[8] == b':' && b[14] == b'.'
        );
    }

    #[test]
    fn component_base_json_lines() {
        let out = capture(Verbosity::new(2), true, || {
            tracing::info!(v = 2, csiDriverName = "d.csi.io", "CSI driver name");
            tracing::error!(error = "gone", "Health check failed");
        });
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0]["ts"].as_f64().unwrap() > 1.7e12);
        assert!(
            lines[0]["caller"]
                .as_str()
                .unwrap()
                .starts_with("src/logging.rs:")
        );
        assert_eq!(lines[0]["msg"], "CSI driver name");
        assert_eq!(lines[0]["v"], 2);
        assert_eq!(lines[0]["csiDriverName"], "d.csi.io");
        assert_eq!(lines[1]["msg"], "Health check failed");
        assert_eq!(lines[1]["err"], "gone");
        assert!(lines[1].get("v").is_none(), "error lines carry no v");
    }

    #[test]
    fn verbosity_and_vmodule() {
        let events = || {
            tracing::info!("v0");
            tracing::info!(v = 2, "v2");
            tracing::debug!("debug");
            tracing::trace!("trace");
            tracing::warn!(v = 9, "warnings always");
        };
        let msgs = |out: String| -> Vec<String> {
            out.lines()
                .map(|l| l.split("] ").nth(1).unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            msgs(capture(Verbosity::new(0), false, events)),
            ["\"v0\"", "\"warnings always\""]
        );
        assert_eq!(msgs(capture(Verbosity::new(2), false, events)).len(), 3);
        assert_eq!(msgs(capture(Verbosity::new(4), false, events)).len(), 4);
        assert_eq!(msgs(capture(Verbosity::new(5), false, events)).len(), 5);
        let vmodule = Verbosity {
            v: 0,
            vmodule: Verbosity::parse_vmodule("log*=4").unwrap(),
        };
        assert_eq!(msgs(capture(vmodule, false, events)).len(), 4);
        let elsewhere = Verbosity {
            v: 0,
            vmodule: Verbosity::parse_vmodule("app=5").unwrap(),
        };
        assert_eq!(msgs(capture(elsewhere, false, events)).len(), 2);
    }

    #[test]
    fn vmodule_syntax() {
        assert_eq!(
            Verbosity::parse_vmodule("app=2,registration*=4").unwrap(),
            vec![("app".to_owned(), 2), ("registration*".to_owned(), 4)]
        );
        assert!(Verbosity::parse_vmodule("").unwrap().is_empty());
        assert!(Verbosity::parse_vmodule("app").is_err());
        assert!(Verbosity::parse_vmodule("app=x").is_err());
        assert!(Verbosity::parse_vmodule("=2").is_err());
    }

    #[test]
    fn dates() {
        // 2026-12-02T21:43:05.829340Z
        let t = UNIX_EPOCH + std::time::Duration::from_micros(1_796_247_785_829_340);
        assert_eq!(civil(t), (12, 2, 21 * 3600 + 43 * 60 + 5, 829_340));
        let leap = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(civil(leap).0..=civil(leap).1, 2..=29);
    }
}
