//! `index.html` beside a lab's results: every plot of the directory (SVG, or PNG when there
//! is no SVG of the same name) with the summary next to it — `summary.md` (or `README.md`)
//! rendered, which holds the measured tables beside the paper's numbers, and any
//! `paper*.csv` as a table. Self-contained: inline CSS, no script, only the directory's own
//! files referenced (relative links), so it opens from disk or from any static server.
//!
//! Written by every `holdline lab` experiment and `holdline bench` when they finish, and by
//! `holdline lab index DIR` for a directory of older results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{LabError, Result};

/// A plot: its path relative to the directory, without extension, and which formats exist.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Plot {
    stem: String,
    svg: bool,
    png: bool,
}

/// The plots in `dir` and its subdirectories (one level), sorted by name.
fn plots(dir: &Path) -> Vec<Plot> {
    let mut found: std::collections::BTreeMap<String, (bool, bool)> = Default::default();
    let mut visit = |sub: &str| {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            return Vec::new();
        };
        let mut subdirs = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if sub.is_empty() {
                name.clone()
            } else {
                format!("{sub}/{name}")
            };
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                subdirs.push(rel);
                continue;
            }
            for (ext, svg) in [(".svg", true), (".png", false)] {
                if let Some(stem) = rel.strip_suffix(ext) {
                    let f = found.entry(stem.to_owned()).or_default();
                    if svg {
                        f.0 = true;
                    } else {
                        f.1 = true;
                    }
                }
            }
        }
        subdirs
    };
    for sub in visit("") {
        visit(&sub);
    }
    found
        .into_iter()
        .map(|(stem, (svg, png))| Plot { stem, svg, png })
        .collect()
}

/// `text` with `&`, `<`, `>` and `"` escaped.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// A path relative to the page as an attribute value (each segment percent-encoded where
/// it has characters outside the safe set).
fn href(rel: &str) -> String {
    let mut out = String::new();
    for b in rel.bytes() {
        if b.is_ascii_alphanumeric() || b"-_./~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Inline Markdown: `code`, **bold**, [text](link); everything else escaped.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('`')
            && let Some(end) = after.find('`')
        {
            let _ = write!(out, "<code>{}</code>", esc(&after[..end]));
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix("**")
            && let Some(end) = after.find("**")
        {
            let _ = write!(out, "<strong>{}</strong>", inline(&after[..end]));
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix('[')
            && let Some(close) = after.find("](")
            && let Some(end) = after[close + 2..].find(')')
        {
            let label = &after[..close];
            let target = &after[close + 2..close + 2 + end];
            let _ = write!(out, "<a href=\"{}\">{}</a>", esc(target), inline(label));
            rest = &after[close + 2 + end + 1..];
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push_str(&esc(&c.to_string()));
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The cells of a Markdown table row.
fn cells(line: &str) -> Vec<&str> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|').map(str::trim).collect()
}

/// The Markdown the labs write, as HTML: headings, paragraphs, tables, lists, fenced code.
pub(crate) fn markdown(md: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    let mut para: Vec<&str> = Vec::new();
    let flush = |para: &mut Vec<&str>, out: &mut String| {
        if !para.is_empty() {
            let _ = writeln!(out, "<p>{}</p>", inline(&para.join(" ")));
            para.clear();
        }
    };
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim();
        if t.is_empty() {
            flush(&mut para, &mut out);
            i += 1;
        } else if t.starts_with("```") {
            flush(&mut para, &mut out);
            let mut code = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                code.push(lines[i]);
                i += 1;
            }
            i += 1;
            let _ = writeln!(out, "<pre>{}</pre>", esc(&code.join("\n")));
        } else if let Some(level) = (1..=6).find(|&n| {
            t.strip_prefix(&"#".repeat(n))
                .is_some_and(|r| r.starts_with(' '))
        }) {
            flush(&mut para, &mut out);
            // Page headings start at h2 (the page's own title is h1).
            let h = (level + 1).min(6);
            let _ = writeln!(out, "<h{h}>{}</h{h}>", inline(t[level..].trim()));
            i += 1;
        } else if t.starts_with('|') {
            flush(&mut para, &mut out);
            let mut rows = Vec::new();
            while i < lines.len() && lines[i].trim().starts_with('|') {
                rows.push(lines[i]);
                i += 1;
            }
            let separator = |r: &str| {
                cells(r)
                    .iter()
                    .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
            };
            out.push_str("<table>\n");
            let has_head = rows.len() > 1 && separator(rows[1]);
            for (k, r) in rows.iter().enumerate() {
                if has_head && k == 1 {
                    continue;
                }
                let tag = if has_head && k == 0 { "th" } else { "td" };
                out.push_str("<tr>");
                for c in cells(r) {
                    let _ = write!(out, "<{tag}>{}</{tag}>", inline(c));
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</table>\n");
        } else if t.starts_with("- ") || t.starts_with("* ") {
            flush(&mut para, &mut out);
            out.push_str("<ul>\n");
            while i < lines.len() {
                let l = lines[i].trim();
                if let Some(item) = l.strip_prefix("- ").or_else(|| l.strip_prefix("* ")) {
                    let _ = writeln!(out, "<li>{}</li>", inline(item));
                } else if !l.is_empty() && lines[i].starts_with("  ") {
                    // A continuation line of the last item.
                    if out.ends_with("</li>\n") {
                        out.truncate(out.len() - "</li>\n".len());
                        let _ = writeln!(out, " {}</li>", inline(l));
                    }
                } else {
                    break;
                }
                i += 1;
            }
            out.push_str("</ul>\n");
        } else {
            para.push(t);
            i += 1;
        }
    }
    flush(&mut para, &mut out);
    out
}

/// A CSV file as an HTML table (first row as the head; quotes are not interpreted).
fn csv_table(text: &str) -> String {
    let mut out = String::from("<table>\n");
    for (k, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let tag = if k == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for c in line.split(',') {
            let _ = write!(out, "<{tag}>{}</{tag}>", esc(c.trim().trim_matches('"')));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

const STYLE: &str = "\
*{box-sizing:border-box}\
body{margin:0;font:14px/1.45 system-ui,-apple-system,'DejaVu Sans',sans-serif;color:#1d232b;background:#f6f7f9}\
header{padding:12px 20px;background:#1d232b;color:#fff}header h1{margin:0;font-size:18px}\
header p{margin:4px 0 0;color:#c9d1db;font-size:13px}header a{color:#9cc2ff}\
.layout{display:flex;align-items:flex-start;gap:20px;padding:16px 20px}\
.plots{flex:1 1 55%;min-width:0}\
.summary{flex:1 1 45%;min-width:0;position:sticky;top:0;max-height:100vh;overflow:auto;background:#fff;\
padding:4px 16px 16px;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08)}\
figure{margin:0 0 18px;background:#fff;padding:10px;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08)}\
figure img{display:block;max-width:100%;height:auto}\
figcaption{font-size:12px;color:#66707c;margin-top:4px}figcaption a{color:#2764c5}\
table{border-collapse:collapse;font-size:12px;font-variant-numeric:tabular-nums;margin:8px 0}\
th,td{border-bottom:1px solid #e6e8eb;padding:3px 8px;text-align:right;white-space:nowrap}\
th:first-child,td:first-child{text-align:left}th{color:#66707c}\
h2{font-size:16px}h3{font-size:14px}pre{background:#f1f3f5;padding:8px;overflow:auto}\
@media (max-width:900px){.layout{flex-direction:column}.summary{position:static;max-height:none}}";

/// Writes `dir/index.html` for the results in `dir` (`title`: e.g. the experiment's name);
/// returns its path.
pub fn write_index(dir: &Path, title: &str) -> Result<PathBuf> {
    let plots = plots(dir);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let summary = read("summary.md")
        .map(|m| ("summary.md", m))
        .or_else(|| read("README.md").map(|m| ("README.md", m)));
    let mut papers: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("paper") && n.ends_with(".csv"))
                .collect()
        })
        .unwrap_or_default();
    papers.sort();
    let mut data: Vec<String> = ["results.json", "points.csv", "steps.csv", "timeline.csv"]
        .iter()
        .filter(|n| dir.join(n).is_file())
        .map(|n| format!("<a href=\"{}\">{}</a>", href(n), esc(n)))
        .collect();
    if let Some((name, _)) = &summary {
        data.push(format!("<a href=\"{}\">{}</a>", href(name), esc(name)));
    }
    let mut html = String::with_capacity(16 * 1024);
    let _ = write!(
        html,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header><h1>{t}</h1>\
         <p>{n} plot(s); data: {d}</p></header>\n<div class=\"layout\">\n<main class=\"plots\">\n",
        t = esc(title),
        n = plots.len(),
        d = if data.is_empty() {
            "–".to_owned()
        } else {
            data.join(", ")
        },
    );
    if plots.is_empty() {
        html.push_str("<p>No plots in this directory.</p>\n");
    }
    for p in &plots {
        let shown = if p.svg {
            format!("{}.svg", p.stem)
        } else {
            format!("{}.png", p.stem)
        };
        let mut links = vec![format!("<a href=\"{}\">{}</a>", href(&shown), esc(&shown))];
        if p.svg && p.png {
            let png = format!("{}.png", p.stem);
            links.push(format!("<a href=\"{}\">{}</a>", href(&png), esc(&png)));
        }
        let _ = writeln!(
            html,
            "<figure class=\"plot\" id=\"plot-{id}\"><img src=\"{src}\" alt=\"{alt}\" loading=\"eager\">\
             <figcaption>{links}</figcaption></figure>",
            id = esc(&p.stem.replace('/', "-")),
            src = href(&shown),
            alt = esc(&p.stem),
            links = links.join(" · "),
        );
    }
    html.push_str("</main>\n<aside class=\"summary\">\n");
    match &summary {
        Some((_, md)) => html.push_str(&markdown(md)),
        None => html.push_str("<p>No summary.md in this directory.</p>\n"),
    }
    for name in &papers {
        if let Some(text) = read(name) {
            let _ = write!(html, "<h2>{}</h2>\n{}", esc(name), csv_table(&text));
        }
    }
    html.push_str("</aside>\n</div>\n</body>\n</html>\n");
    let path = dir.join("index.html");
    std::fs::write(&path, html)
        .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    Ok(path)
}

/// `holdline lab index DIR [--title TITLE]`: (re)writes `DIR/index.html`.
pub(crate) fn main(args: Vec<String>) -> std::process::ExitCode {
    use std::process::ExitCode;
    let mut dir = None;
    let mut title = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--title" => title = it.next(),
            "-h" | "--help" => {
                println!(
                    "usage: holdline lab index DIR [--title TITLE]\n(re)writes DIR/index.html: every plot with the summary and the paper's numbers next to it"
                );
                return ExitCode::SUCCESS;
            }
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            other => {
                eprintln!("holdline lab index: unexpected argument `{other}`");
                return ExitCode::from(2);
            }
        }
    }
    let Some(dir) = dir else {
        eprintln!("usage: holdline lab index DIR [--title TITLE]");
        return ExitCode::from(2);
    };
    if !dir.is_dir() {
        eprintln!("holdline lab index: {}: not a directory", dir.display());
        return ExitCode::FAILURE;
    }
    let title = title.unwrap_or_else(|| default_title(&dir));
    match write_index(&dir, &title) {
        Ok(p) => {
            eprintln!("holdline lab index: wrote {}", p.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("holdline lab index: {e}");
            ExitCode::FAILURE
        }
    }
}

/// "holdline lab EXPERIMENT: DIR", the experiment from `results.json` when it names one.
fn default_title(dir: &Path) -> String {
    let experiment = std::fs::read_to_string(dir.join("results.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["experiment"].as_str().map(str::to_owned));
    let name = dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    match experiment {
        Some(e) => format!("holdline lab {e}: {name}"),
        None => format!("holdline results: {name}"),
    }
}

/// Writes the index after an experiment, a failure only reported (the results stand).
pub(crate) fn after_run(dir: &Path, title: &str) {
    match write_index(dir, title) {
        Ok(p) => eprintln!("index: {}", p.display()),
        Err(e) => eprintln!("index.html not written: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_headings_and_inline() {
        let html = markdown(
            "# Title\n\nSome `code` and **bold** [link](a.svg).\nsame paragraph\n\n\
             | a | b |\n| --- | ---: |\n| 1 | <2> |\n\n- one\n- two\n\n```\nx < y\n```\n",
        );
        assert!(html.contains("<h2>Title</h2>"), "{html}");
        assert!(
            html.contains("<p>Some <code>code</code> and <strong>bold</strong> <a href=\"a.svg\">link</a>. same paragraph</p>"),
            "{html}"
        );
        assert!(html.contains("<tr><th>a</th><th>b</th></tr>"), "{html}");
        assert!(
            html.contains("<tr><td>1</td><td>&lt;2&gt;</td></tr>"),
            "{html}"
        );
        assert!(!html.contains("---"), "{html}");
        assert!(html.contains("<li>one</li>\n<li>two</li>"), "{html}");
        assert!(html.contains("<pre>x &lt; y</pre>"), "{html}");
    }

    #[test]
    fn index_has_every_plot_and_the_summary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("a.svg"), "<svg width=\"10\" height=\"10\"></svg>").expect("svg");
        std::fs::write(d.join("a.png"), b"png").expect("png");
        std::fs::write(d.join("b only.png"), b"png").expect("png");
        std::fs::create_dir(d.join("sub")).expect("sub");
        std::fs::write(d.join("sub/c.svg"), "<svg/>").expect("svg");
        std::fs::write(
            d.join("summary.md"),
            "| x | paper |\n| --- | --- |\n| 1 | 2 |\n",
        )
        .expect("md");
        std::fs::write(d.join("paper.csv"), "load,goodput\n1,0.9\n").expect("csv");
        let path = write_index(d, "t <1>").expect("index");
        let html = std::fs::read_to_string(path).expect("read");
        assert!(html.contains("<title>t &lt;1&gt;</title>"));
        assert!(html.contains("<img src=\"a.svg\""), "SVG preferred: {html}");
        assert!(html.contains("<a href=\"a.png\">a.png</a>"), "PNG linked");
        assert!(
            html.contains("<img src=\"b%20only.png\""),
            "PNG alone: {html}"
        );
        assert!(
            html.contains("<img src=\"sub/c.svg\""),
            "subdirectory: {html}"
        );
        assert_eq!(html.matches("<figure").count(), 3);
        assert!(html.contains("<th>paper</th>"));
        assert!(html.contains("<h2>paper.csv</h2>") && html.contains("<td>0.9</td>"));
        assert!(!html.contains("http://") && !html.contains("https://"));
    }
}
