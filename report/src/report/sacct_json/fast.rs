//! The fast decoder of one job object: a hand-written scanner that fills the same [`RawJob`] as
//! serde, reading the fields the report needs and *skipping* the rest (steps, requested TRES,
//! CPU times: most of each job) without building anything.
//!
//! Whatever it returns, serde would return the very same [`RawJob`] for these bytes, with one
//! exception: a member it does not read whose value is a pretty-printed object or array (the
//! opener ends the member's line) is jumped over to the line holding only the closer at the
//! member's indent, with one SIMD search, and its inside is not validated. Everything else it
//! skips is validated as strictly as serde's `IgnoredAny` does (string escapes and control
//! characters, number grammar, `true`/`false`/`null`, commas, colons, brackets; no UTF-8 check, as
//! serde makes none there). On anything it is not sure of it returns `None`, and serde decides and
//! words the error: a field of another type, a duplicate field, a struct written as an array, a
//! number with a fraction or exponent or of more than 18 digits, a `\u` surrogate escape, an
//! escaped key, more than 128 levels. The tests compare both decoders on the fixtures and on every
//! one-byte change of compact jobs (which have nothing to jump over).
//!
//! Why it is kept (issue 11 asked for a maintained crate where one meets the targets): on the
//! 1M-job benchmark (`scripts/bench-report`, 5.36 GB) serde alone (`parse_job_serde`: borrowed
//! strings, `IgnoredAny`) took 9.1-9.4 s of CPU against this decoder's 5.3-5.9 s, and in the same
//! interleaved runs its median wall time was 10.3 s against 6.0 s (load 3.7-7.3) and 18.9 s
//! against 11.7 s (load 9): the 10 s target held for serde only while the two cores were free
//! (4.7 s). sonic-rs 0.5 (serde and `get_many`) and simd-json 0.15 measured no better than serde
//! (8.5-11 s of CPU). The figures are in `docs/benchmarks.md`.

use std::borrow::Cow;

use super::{
    Num, RawArray, RawComment, RawHet, RawJob, RawState, RawTime, RawTres, RawTresItem, StateName,
};

/// Parses `bytes` (one job object, nothing around it but whitespace) like serde would, or `None`.
pub(super) fn raw_job(bytes: &[u8]) -> Option<RawJob<'_>> {
    let mut c = Cur {
        b: bytes,
        i: 0,
        nl: usize::MAX,
        clean: false,
        indent: None,
    };
    let job = c.job()?;
    c.ws();
    (c.i == c.b.len()).then_some(job)
}

const SPACES: u64 = u64::from_le_bytes([b' '; 8]);
const ONES: u64 = u64::MAX / 255;
const HIGH: u64 = ONES << 7;

/// Whether a byte ends the plain run of a string: `"`, `\` or a control character.
const fn string_stop_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
}
static STRING_STOP: [bool; 256] = string_stop_table();

/// Longest indent the closer search handles (deeper members are skipped token by token).
const MAX_INDENT: usize = 64;

thread_local! {
    /// `\n<n spaces><closer>` searchers, built once per thread and indent.
    static CLOSERS: std::cell::RefCell<Vec<Option<memchr::memmem::Finder<'static>>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Offset in `hay` of the first `\n`, `n` spaces and `close`.
fn find_closer(n: usize, close: u8, hay: &[u8]) -> Option<usize> {
    if n > MAX_INDENT {
        return None;
    }
    let slot = n * 2 + usize::from(close == b']');
    CLOSERS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() <= slot {
            c.resize_with(slot + 1, || None);
        }
        let f = c[slot].get_or_insert_with(|| {
            let mut pat = Vec::with_capacity(n + 2);
            pat.push(b'\n');
            pat.resize(n + 1, b' ');
            pat.push(close);
            memchr::memmem::Finder::new(&pat).into_owned()
        });
        f.find(hay)
    })
}

struct Cur<'a> {
    b: &'a [u8],
    i: usize,
    /// Where the last whitespace run's last newline was, and whether only spaces followed it.
    nl: usize,
    clean: bool,
    /// Indent of the member whose value is being read, when its key starts a line.
    indent: Option<usize>,
}

/// Open containers of a skipped value, one bit each (1: object), as serde's `ignore_value` keeps
/// them (it has no depth limit; past 128 levels this scanner leaves the job to serde).
struct Frames {
    bits: u128,
    depth: u32,
}

impl<'a> Cur<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skips JSON whitespace; runs of spaces (a pretty-printer's indent) eight at a time.
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b' ' => {
                    self.i += 1;
                    while let Some(chunk) = self.b.get(self.i..self.i + 8) {
                        let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])) ^ SPACES;
                        if w != 0 {
                            self.i += (w.trailing_zeros() / 8) as usize;
                            break;
                        }
                        self.i += 8;
                    }
                }
                b'\n' => {
                    self.nl = self.i;
                    self.clean = true;
                    self.i += 1;
                }
                b'\t' | b'\r' => {
                    self.clean = false;
                    self.i += 1;
                }
                _ => return,
            }
        }
    }

    /// After whitespace, the byte `want`, consumed.
    #[inline]
    fn eat(&mut self, want: u8) -> Option<()> {
        self.ws();
        if self.peek()? == want {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// Moves past the plain bytes of a string to the next `"`, `\` or control byte, eight bytes
    /// at a time.
    #[inline]
    fn string_run(&mut self) {
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            let ctrl = w.wrapping_sub(ONES * 0x20) & !w;
            let q = w ^ (ONES * u64::from(b'"'));
            let quote = q.wrapping_sub(ONES) & !q;
            let bs = w ^ (ONES * u64::from(b'\\'));
            let backslash = bs.wrapping_sub(ONES) & !bs;
            let m = (ctrl | quote | backslash) & HIGH;
            if m != 0 {
                // The lowest flagged byte is exact (borrows only run upwards); later ones may
                // be false positives, which the byte loop below settles.
                self.i += (m.trailing_zeros() / 8) as usize;
                break;
            }
            self.i += 8;
        }
        while let Some(&c) = self.b.get(self.i) {
            if STRING_STOP[c as usize] {
                return;
            }
            self.i += 1;
        }
    }

    /// Skips the rest of a string whose `"` was consumed, validating escapes as serde's
    /// `ignore_str` does.
    fn skip_str(&mut self) -> Option<()> {
        loop {
            self.string_run();
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => match *self.b.get(self.i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                    b'u' => {
                        let hex = self.b.get(self.i + 2..self.i + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        self.i += 6;
                    }
                    _ => return None,
                },
                _ => return None,
            }
        }
    }

    /// A string read as a `&str` or `Cow<str>` (the `"` not yet consumed): borrowed when it has
    /// no escapes, UTF-8 validated like serde's `parse_str`.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        let start = self.i;
        self.string_run();
        if self.peek()? == b'"' {
            let s = &self.b[start..self.i];
            self.i += 1;
            return std::str::from_utf8(s).ok().map(Cow::Borrowed);
        }
        let mut out: Vec<u8> = Vec::with_capacity(self.i - start + 16);
        let mut from = start;
        loop {
            match self.peek()? {
                b'"' => {
                    out.extend_from_slice(&self.b[from..self.i]);
                    self.i += 1;
                    return String::from_utf8(out).ok().map(Cow::Owned);
                }
                b'\\' => {
                    out.extend_from_slice(&self.b[from..self.i]);
                    let e = *self.b.get(self.i + 1)?;
                    self.i += 2;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(b'\x08'),
                        b'f' => out.push(b'\x0c'),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let hex = std::str::from_utf8(self.b.get(self.i..self.i + 4)?).ok()?;
                            if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                                return None;
                            }
                            let n = u32::from_str_radix(hex, 16).ok()?;
                            // Surrogates (pairs or lone) are serde's to judge.
                            let ch = char::from_u32(n)?;
                            let mut tmp = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                            self.i += 4;
                        }
                        _ => return None,
                    }
                    from = self.i;
                }
                _ => return None,
            }
            self.string_run();
        }
    }

    /// An object key (the `"` not yet consumed) as raw bytes, for fields matched by name: keys
    /// with escapes are left to serde (it would unescape before matching); UTF-8 checked.
    #[inline]
    fn key(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        let start = self.i;
        self.string_run();
        if self.peek()? != b'"' {
            return None;
        }
        let k = &self.b[start..self.i];
        self.i += 1;
        if !k.is_ascii() {
            std::str::from_utf8(k).ok()?;
        }
        self.eat(b':')?;
        Some(k)
    }

    /// Steps into an object's members: after `{` (consumed by the caller), `Some(key)` for each
    /// member with the `:` consumed, `None` at the end. `Err` is a syntax error (serde's call).
    #[inline]
    fn next_key(&mut self, first: &mut bool) -> Result<Option<&'a [u8]>, ()> {
        self.nl = usize::MAX;
        self.ws();
        match self.peek() {
            Some(b'}') => {
                self.i += 1;
                return Ok(None);
            }
            Some(b',') if !*first => {
                self.i += 1;
                self.nl = usize::MAX;
                self.ws();
            }
            Some(b'"') if *first => {}
            _ => return Err(()),
        }
        *first = false;
        // A key that starts a line (only spaces before it) gives its member's indent.
        self.indent =
            (self.nl != usize::MAX && self.clean && self.nl < self.i).then(|| self.i - self.nl - 1);
        self.nl = usize::MAX;
        self.key().map(Some).ok_or(())
    }

    /// Opens a struct: serde also takes an array for one, which is left to it.
    #[inline]
    fn open_struct(&mut self) -> Option<()> {
        self.eat(b'{')
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? == word {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    /// Skips a number as serde's `ignore_integer` does (the `-` consumed by the caller).
    fn skip_number(&mut self) -> Option<()> {
        match self.peek()? {
            b'0' => {
                self.i += 1;
                if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    return None;
                }
            }
            b'1'..=b'9' => {
                self.i += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            let from = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            if self.i == from {
                return None;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            let from = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            if self.i == from {
                return None;
            }
        }
        Some(())
    }

    /// Skips one value of any kind, validating it like serde's `ignore_value`.
    fn skip(&mut self) -> Option<()> {
        let mut f = Frames { bits: 0, depth: 0 };
        'value: loop {
            self.ws();
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    self.skip_str()?;
                }
                c @ (b'{' | b'[') => {
                    self.i += 1;
                    if f.depth == 128 {
                        return None;
                    }
                    f.bits = (f.bits << 1) | u128::from(c == b'{');
                    f.depth += 1;
                    self.ws();
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.peek()? == close {
                        self.i += 1;
                        f.bits >>= 1;
                        f.depth -= 1;
                    } else {
                        if c == b'{' {
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                }
                b'-' => {
                    self.i += 1;
                    self.skip_number()?;
                }
                b'0'..=b'9' => self.skip_number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => return None,
            }
            // After a value: commas and closings until the next value or the end.
            loop {
                if f.depth == 0 {
                    return Some(());
                }
                self.ws();
                let object = f.bits & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        if object {
                            self.ws();
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.i += 1;
                f.bits >>= 1;
                f.depth -= 1;
            }
        }
    }

    /// Skips the value of a member the report does not read. A pretty-printed container (its
    /// opener ends the member's line) is jumped over to the first line that holds only its closer
    /// at the member's indent, found with one SIMD search; its inside is not looked at. Anything
    /// else is skipped token by token.
    fn skip_member(&mut self) -> Option<()> {
        if let Some(n) = self.indent {
            self.ws();
            let open = self.peek()?;
            if (open == b'{' || open == b'[') && self.b.get(self.i + 1) == Some(&b'\n') {
                let close = if open == b'{' { b'}' } else { b']' };
                let from = self.i + 1;
                if let Some(at) = find_closer(n, close, &self.b[from..]) {
                    self.i = from + at + n + 2;
                    return Some(());
                }
                return None;
            }
        }
        self.skip()
    }

    /// A key inside a skipped object (`"` next), ignored like serde's `ignore_str`, and its `:`.
    #[inline]
    fn member_key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        self.skip_str()?;
        self.eat(b':')
    }

    /// `Num`: an integer, `null`, or `{set, infinite, number}`.
    fn num(&mut self) -> Option<Num> {
        self.num_in(0)
    }

    /// `Num` at `nest` levels of `number` objects (deeper ones are serde's: it has a limit).
    fn num_in(&mut self, nest: u32) -> Option<Num> {
        if nest > 8 {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                Some(Num(0))
            }
            b'{' => {
                self.i += 1;
                let (mut set, mut infinite, mut number) = (true, false, 0i64);
                let mut first = true;
                while let Some(k) = self.next_key(&mut first).ok()? {
                    match k {
                        b"set" => set = self.boolean()?,
                        b"infinite" => infinite = self.boolean()?,
                        b"number" => number = self.num_in(nest + 1)?.0,
                        _ => self.skip_member()?,
                    }
                }
                Some(Num(if set && !infinite { number } else { 0 }))
            }
            b'-' => {
                self.i += 1;
                let v = self.digits()?;
                // serde reads -0 as the float -0.0, which the visitor turns into 0 all the same.
                Some(Num(-v))
            }
            b'0'..=b'9' => Some(Num::of(self.digits()?)),
            _ => None,
        }
    }

    /// An unsigned integer of at most 18 digits, not followed by a fraction or exponent.
    fn digits(&mut self) -> Option<i64> {
        let start = self.i;
        let mut v: i64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            v = v * 10 + i64::from(c - b'0');
            self.i += 1;
            if self.i - start > 18 {
                return None;
            }
        }
        let n = self.i - start;
        if n == 0 || (n > 1 && self.b[start] == b'0') {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(v)
    }

    fn boolean(&mut self) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b't' => self.literal(b"true").map(|()| true),
            b'f' => self.literal(b"false").map(|()| false),
            _ => None,
        }
    }

    /// `Option<Cow<str>>`: `null` or a string.
    fn opt_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        self.ws();
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        self.string().map(Some)
    }

    /// Sets a field once: serde's derived structs refuse a duplicate field.
    #[inline]
    fn once<T>(seen: &mut u32, bit: u32, v: Option<T>) -> Option<T> {
        if *seen & bit != 0 {
            return None;
        }
        *seen |= bit;
        v
    }

    fn job(&mut self) -> Option<RawJob<'a>> {
        self.open_struct()?;
        let mut j = RawJob::default();
        let mut seen = 0u32;
        let mut first = true;
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"job_id" => j.job_id = Self::once(&mut seen, 1, self.num())?,
                b"array" => j.array = Self::once(&mut seen, 1 << 1, self.array())?,
                b"het" => j.het = Self::once(&mut seen, 1 << 2, self.het())?,
                b"partition" => j.partition = Self::once(&mut seen, 1 << 3, self.opt_string())?,
                b"account" => j.account = Self::once(&mut seen, 1 << 4, self.opt_string())?,
                b"user" => j.user = Self::once(&mut seen, 1 << 5, self.opt_string())?,
                b"cluster" => j.cluster = Self::once(&mut seen, 1 << 6, self.opt_string())?,
                b"qos" => j.qos = Self::once(&mut seen, 1 << 7, self.opt_string())?,
                b"state" => j.state = Self::once(&mut seen, 1 << 8, self.state())?,
                b"time" => j.time = Self::once(&mut seen, 1 << 9, self.time())?,
                b"allocation_nodes" => {
                    j.allocation_nodes = Self::once(&mut seen, 1 << 10, self.num())?
                }
                b"tres" => j.tres = Self::once(&mut seen, 1 << 11, self.tres())?,
                b"comment" => j.comment = Self::once(&mut seen, 1 << 12, self.comment())?,
                b"restart_cnt" => j.restart_cnt = Self::once(&mut seen, 1 << 13, self.num())?,
                b"nodes" => j.nodes = Self::once(&mut seen, 1 << 14, self.opt_string())?,
                _ => self.skip_member()?,
            }
        }
        Some(j)
    }

    fn array(&mut self) -> Option<RawArray> {
        self.open_struct()?;
        let mut a = RawArray::default();
        let (mut seen, mut first) = (0u32, true);
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"job_id" => a.job_id = Self::once(&mut seen, 1, self.num())?,
                b"task_id" => a.task_id = Self::once(&mut seen, 2, self.num())?,
                _ => self.skip_member()?,
            }
        }
        Some(a)
    }

    fn het(&mut self) -> Option<RawHet> {
        self.open_struct()?;
        let mut h = RawHet::default();
        let (mut seen, mut first) = (0u32, true);
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"job_id" => h.job_id = Self::once(&mut seen, 1, self.num())?,
                b"job_offset" => h.job_offset = Self::once(&mut seen, 2, self.num())?,
                _ => self.skip_member()?,
            }
        }
        Some(h)
    }

    fn state(&mut self) -> Option<RawState> {
        self.open_struct()?;
        let mut s = RawState::default();
        let (mut seen, mut first) = (0u32, true);
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"current" => s.current = Self::once(&mut seen, 1, self.state_name())?,
                _ => self.skip_member()?,
            }
        }
        Some(s)
    }

    /// `StateName`: a string, a list of strings (REQUEUED wins, else the first), or `null`.
    fn state_name(&mut self) -> Option<StateName> {
        self.ws();
        match self.peek()? {
            b'"' => self.string().map(|s| StateName(s.into_owned())),
            b'n' => self.literal(b"null").map(|()| StateName::default()),
            b'[' => {
                self.i += 1;
                let mut pick: Option<Cow<'a, str>> = None;
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                } else {
                    loop {
                        self.ws();
                        let v = self.string()?;
                        if v == "REQUEUED" || pick.is_none() {
                            pick = Some(v);
                        }
                        self.ws();
                        match self.peek()? {
                            b',' => self.i += 1,
                            b']' => {
                                self.i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                Some(StateName(pick.map(Cow::into_owned).unwrap_or_default()))
            }
            _ => None,
        }
    }

    fn time(&mut self) -> Option<RawTime> {
        self.open_struct()?;
        let mut t = RawTime::default();
        let (mut seen, mut first) = (0u32, true);
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"submission" => t.submission = Self::once(&mut seen, 1, self.num())?,
                b"eligible" => t.eligible = Self::once(&mut seen, 2, self.num())?,
                b"start" => t.start = Self::once(&mut seen, 4, self.num())?,
                b"end" => t.end = Self::once(&mut seen, 8, self.num())?,
                b"elapsed" => t.elapsed = Self::once(&mut seen, 16, self.num())?,
                _ => self.skip_member()?,
            }
        }
        Some(t)
    }

    fn tres(&mut self) -> Option<RawTres<'a>> {
        self.open_struct()?;
        let mut t = RawTres::default();
        let (mut seen, mut first) = (0u32, true);
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"allocated" => t.allocated = Self::once(&mut seen, 1, self.tres_list())?,
                _ => self.skip_member()?,
            }
        }
        Some(t)
    }

    fn tres_list(&mut self) -> Option<Vec<RawTresItem<'a>>> {
        self.eat(b'[')?;
        let mut v = Vec::new();
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(v);
        }
        loop {
            v.push(self.tres_item()?);
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(v);
                }
                _ => return None,
            }
        }
    }

    fn tres_item(&mut self) -> Option<RawTresItem<'a>> {
        self.open_struct()?;
        let mut t = RawTresItem::default();
        let (mut seen, mut first) = (0u32, true);
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"type" => {
                    self.ws();
                    t.kind = Self::once(&mut seen, 1, self.string())?;
                }
                b"name" => t.name = Self::once(&mut seen, 2, self.opt_string())?,
                b"count" => t.count = Self::once(&mut seen, 4, self.num())?,
                _ => self.skip_member()?,
            }
        }
        Some(t)
    }

    fn comment(&mut self) -> Option<RawComment<'a>> {
        self.open_struct()?;
        let mut c = RawComment::default();
        let (mut seen, mut first) = (0u32, true);
        while let Some(k) = self.next_key(&mut first).ok()? {
            match k {
                b"administrator" => c.administrator = Self::once(&mut seen, 1, self.opt_string())?,
                _ => self.skip_member()?,
            }
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{JobRecord, parse_job, parse_job_serde};
    use super::raw_job;

    fn fixture(path: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/../tests/fixtures/sacct/{path}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    /// The jobs of a document pretty-printed like sacct's (jobs at an indent of four), as they
    /// lie in the file.
    fn raw_jobs(doc: &[u8]) -> Vec<&[u8]> {
        let mut at = memchr::memmem::find(doc, b"\"jobs\": [").unwrap();
        let mut out = Vec::new();
        while let Some(i) = memchr::memmem::find(&doc[at..], b"\n    {") {
            let open = at + i + 5;
            let close = open + memchr::memmem::find(&doc[open..], b"\n    }").unwrap() + 6;
            out.push(&doc[open..close]);
            at = close;
        }
        out
    }

    fn fast(bytes: &[u8]) -> JobRecord {
        let raw = raw_job(bytes).unwrap_or_else(|| {
            panic!(
                "the fast decoder left this job to serde:\n{}",
                String::from_utf8_lossy(bytes)
            )
        });
        raw.into_record()
    }

    #[test]
    fn every_fixture_job_takes_the_fast_path_and_reads_as_serde_does() {
        let mut n = 0;
        for path in [
            "generated/history-22.05.json",
            "generated/history-v0.0.40.json",
            "hand/history-22.05.json",
            "testbed/sacct-22.05.json",
        ] {
            let doc = fixture(path);
            for job in raw_jobs(&doc) {
                assert_eq!(fast(job), parse_job_serde(job).unwrap(), "{path}");
                n += 1;
            }
            // The same jobs compact (every member skipped token by token) and pretty-printed
            // by serde_json (another indent).
            let v: serde_json::Value = serde_json::from_slice(&doc).unwrap();
            for job in v["jobs"].as_array().unwrap() {
                for text in [
                    serde_json::to_string(job).unwrap(),
                    serde_json::to_string_pretty(job).unwrap(),
                ] {
                    let b = text.as_bytes();
                    assert_eq!(fast(b), parse_job_serde(b).unwrap(), "{path}");
                }
            }
        }
        assert!(n > 100, "{n} jobs");
    }

    /// A compact job has no pretty-printed member to jump over, so every byte is read: whatever
    /// is changed, the fast decoder either agrees with serde or leaves the job to it.
    #[test]
    fn a_mutated_compact_job_is_read_as_serde_reads_it_or_left_to_serde() {
        let mut jobs = Vec::new();
        for path in [
            "generated/history-22.05.json",
            "generated/history-v0.0.40.json",
        ] {
            let v: serde_json::Value = serde_json::from_slice(&fixture(path)).unwrap();
            jobs.push(serde_json::to_string(&v["jobs"][3]).unwrap().into_bytes());
        }
        let (mut taken, mut left) = (0, 0);
        for job in &jobs {
            for at in 0..job.len() {
                let mut variants = vec![[&job[..at], &job[at + 1..]].concat()];
                for b in [b'"', b',', b'\\', b'}', b'0', b'-', 0x01, 0xc3] {
                    let mut m = job.clone();
                    m[at] = b;
                    variants.push(m);
                }
                for m in &variants {
                    match raw_job(m) {
                        Some(raw) => {
                            taken += 1;
                            let serde = parse_job_serde(m).unwrap_or_else(|e| {
                                panic!(
                                    "fast read what serde refuses ({e}):\n{}",
                                    String::from_utf8_lossy(m)
                                )
                            });
                            assert_eq!(raw.into_record(), serde, "{}", String::from_utf8_lossy(m));
                        }
                        None => left += 1,
                    }
                }
            }
        }
        assert!(
            taken > 1000 && left > 1000,
            "{taken} read, {left} left to serde"
        );
    }

    #[test]
    fn a_job_serde_refuses_gets_serde_s_own_error() {
        let doc = fixture("generated/history-22.05.json");
        let job = std::str::from_utf8(raw_jobs(&doc)[0]).unwrap().to_string();
        for (from, to) in [
            ("\"partition\": \"", "\"partition\": 5, \"x\": \""),
            ("\"job_id\": ", "\"job_id\": 1, \"job_id\": "),
            ("\"elapsed\": ", "\"elapsed\": \"soon\", \"e\": "),
            ("\"current\": \"", "\"current\": 7, \"c\": \""),
            (
                "\"tres\": {\n        \"allocated\": [",
                "\"tres\": {\n        \"allocated\": null, \"a\": [",
            ),
            ("fabric-check/v1", "fabric-check/v1 \\q"),
            ("\"account\": \"", "\"account\": \"\u{1}"),
            ("\"time\": {", "\"time\": {,"),
        ] {
            assert!(job.contains(from), "{from}");
            let bad = job.replacen(from, to, 1);
            let fast = parse_job(bad.as_bytes())
                .map(|_| ())
                .map_err(|e| e.to_string())
                .expect_err(to);
            assert_eq!(
                fast,
                parse_job_serde(bad.as_bytes()).unwrap_err().to_string()
            );
        }
    }

    /// The documented difference: the inside of a pretty-printed member the report does not read
    /// (here the job's steps) is jumped over, not validated.
    #[test]
    fn an_unread_pretty_printed_member_is_not_looked_at() {
        let doc = fixture("generated/history-22.05.json");
        let job = std::str::from_utf8(raw_jobs(&doc)[0]).unwrap();
        assert!(job.contains("\"steps\": [\n"));
        let broken = job.replacen("\"steps\": [\n", "\"steps\": [\n tru ]] {,\n", 1);
        assert!(parse_job_serde(broken.as_bytes()).is_err());
        assert_eq!(
            parse_job(broken.as_bytes()).unwrap(),
            parse_job_serde(job.as_bytes()).unwrap()
        );
    }
}
