//! A headless Chromium driven through chromedriver's W3C WebDriver HTTP API (Debian's
//! `chromium` and `chromium-driver`): open a page, run a script in it, take a screenshot.
//! A small client over `std::net::TcpStream` (HTTP/1.1, one request per connection).
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Guard, free_port, require_tool};

/// Whether chromium and chromedriver are installed; fails the test with the advice when not
/// (`scripts/install-test-deps` installs them).
pub fn require_browser() {
    for tool in ["chromium", "chromedriver"] {
        require_tool(
            tool,
            "--version",
            "apt-get install chromium chromium-driver (scripts/install-test-deps)",
        );
    }
}

/// One HTTP request to `addr`; returns the status code and the body.
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to chromedriver {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send request");
    // chromedriver keeps the connection open: read the head, then Content-Length bytes (or
    // chunks up to the last one).
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).expect("read response head");
        assert!(
            n > 0,
            "chromedriver closed the connection before its answer"
        );
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let length: Option<usize> = header("content-length").and_then(|v| v.parse().ok());
    loop {
        let body = &raw[head_end..];
        let done = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        match s.read(&mut buf).expect("read response body") {
            0 => break,
            n => raw.extend_from_slice(&buf[..n]),
        }
    }
    let rest = String::from_utf8_lossy(&raw[head_end..]).into_owned();
    let body = if chunked { dechunk(&rest) } else { rest };
    (code, body)
}

/// The body of a chunked transfer.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Standard base64 (the screenshot's encoding), padding and whitespace ignored.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let digits: Vec<u32> = s.bytes().filter_map(val).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut n = 0u32;
        for (i, d) in chunk.iter().enumerate() {
            n |= d << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}

/// A chromedriver process and one browser session (headless Chromium), both ended when
/// dropped: the session by `DELETE`, chromedriver by PID.
pub struct Browser {
    addr: SocketAddr,
    session: String,
    _driver: Guard,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session with a window of
    /// `width` × `height` pixels.
    pub fn start(width: u32, height: u32) -> Self {
        require_browser();
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let driver = Guard(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn chromedriver"),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && serde_json::from_str::<Value>(&http(addr, "GET", "/status", None).1)
                    .is_ok_and(|v| v["value"]["ready"] == true);
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver not ready in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        // A profile of our own in a temporary directory (the sandbox needs a user namespace,
        // which root in a container may not get: --no-sandbox).
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--hide-scrollbars",
                         format!("--window-size={width},{height}")]
            }
        }}});
        let (code, body) = http(addr, "POST", "/session", Some(&caps));
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session ({code}): {body}"))
            .to_owned();
        Self {
            addr,
            session,
            _driver: driver,
        }
    }

    fn call(&self, method: &str, what: &str, body: Option<&Value>) -> Value {
        let path = format!("/session/{}/{what}", self.session);
        let (code, text) = http(self.addr, method, &path, body);
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("WebDriver {what}: {e}: {text}"));
        assert_eq!(code, 200, "WebDriver {what}: {v}");
        v["value"].clone()
    }

    /// Opens `url` and waits until the document has loaded (WebDriver's page-load strategy).
    pub fn open(&self, url: &str) {
        self.call("POST", "url", Some(&json!({ "url": url })));
    }

    /// Runs `script` (a function body: `return ...;`) in the page; its value.
    pub fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "execute/sync",
            Some(&json!({ "script": script, "args": [] })),
        )
    }

    /// Evaluates `script` until `pred` holds for its value (bounded by `limit`); the value.
    pub fn wait_for(&self, script: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.eval(script);
            if pred(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "page condition not reached within {limit:?}; last value {v}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG screenshot of the viewport, written to `path`; returns its bytes.
    pub fn screenshot(&self, path: &Path) -> Vec<u8> {
        let b64 = self.call("GET", "screenshot", None);
        let png = base64_decode(b64.as_str().expect("screenshot is a base64 string"));
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        png
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the browser; chromedriver itself is killed by its guard.
        let _ = http(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
    }
}

/// Decodes `png` entirely (signature, chunks, CRCs, image data) with the `png` crate;
/// returns its width and height. Panics when it is not a valid PNG.
pub fn check_png(png: &[u8]) -> (u32, u32) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG image data");
    assert!(info.width > 0 && info.height > 0);
    (info.width, info.height)
}

/// What the lab index check reads from the page: every image with its state.
const READ_INDEX: &str = r##"
const imgs = Array.from(document.images);
return {
  ready: document.readyState,
  images: imgs.map((i) => ({ src: i.getAttribute("src"), complete: i.complete, width: i.naturalWidth, height: i.naturalHeight })),
  figures: document.querySelectorAll("figure.plot").length,
  summary_tables: document.querySelectorAll(".summary table").length,
  summary_rows: document.querySelectorAll(".summary table tr").length,
  summary_text: (document.querySelector(".summary") || { textContent: "" }).textContent.length,
};
"##;

/// Opens `dir/index.html` (a lab's) in `browser` from disk and checks that every plot of the
/// directory is on the page and loaded (decoded with a non-zero size) and that the summary's
/// tables are rendered; returns what the page showed.
pub fn check_lab_index(browser: &Browser, dir: &Path) -> Value {
    let index = dir.join("index.html");
    assert!(index.is_file(), "{} written", index.display());
    let dir = dir.canonicalize().expect("canonical dir");
    // The plots in the directory (and one level down), by name without extension.
    let mut stems = std::collections::BTreeSet::new();
    let mut visit = |d: &Path, prefix: &str| {
        for e in std::fs::read_dir(d).expect("read dir").flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            for ext in [".svg", ".png"] {
                if let Some(stem) = name.strip_suffix(ext) {
                    stems.insert(format!("{prefix}{stem}"));
                }
            }
        }
    };
    visit(&dir, "");
    for e in std::fs::read_dir(&dir).expect("read dir").flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let name = e.file_name().to_string_lossy().into_owned();
            visit(&e.path(), &format!("{name}/"));
        }
    }
    assert!(!stems.is_empty(), "plots in {}", dir.display());
    browser.open(&format!("file://{}", dir.join("index.html").display()));
    let v = browser.wait_for(READ_INDEX, Duration::from_secs(30), |v| {
        v["ready"] == "complete"
            && v["images"]
                .as_array()
                .is_some_and(|a| a.iter().all(|i| i["complete"] == true))
    });
    let images = v["images"].as_array().expect("images");
    assert_eq!(
        images.len(),
        stems.len(),
        "one image per plot ({stems:?}): {v}"
    );
    for i in images {
        assert!(
            i["width"].as_u64().unwrap_or(0) > 0 && i["height"].as_u64().unwrap_or(0) > 0,
            "plot loaded and decoded: {i}"
        );
        let src = i["src"].as_str().unwrap_or("").replace("%20", " ");
        let stem = src
            .strip_suffix(".svg")
            .or_else(|| src.strip_suffix(".png"))
            .unwrap_or("");
        assert!(stems.contains(stem), "{src} is one of the plots");
    }
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_round_trip() {
        assert_eq!(super::base64_decode("aGVsbG8="), b"hello");
        assert_eq!(super::base64_decode("aGVsbG8h"), b"hello!");
        assert_eq!(super::base64_decode("aGk="), b"hi");
    }
}
