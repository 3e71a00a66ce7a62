//! Line charts as SVG and PNG with `plotters` (text drawn with a TTF font of the system).

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{LabError, Result};

/// Fonts tried, in order, for the text of the plots.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers a system font as "sans-serif" once; an error names the Debian package.
fn font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = FONTS
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| {
                "no TTF font found: install the Debian package fonts-dejavu-core".to_string()
            })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "the TTF font could not be read".to_string())
    })
    .clone()
    .map_err(|reason| LabError::Plot {
        path: FONTS[0].into(),
        reason,
    })
}

/// One colour per server in every plot (holdline blue, Kamailio red, holdline with overload
/// control off green), lighter for the REGISTER series and for `bench`'s sustained TCP
/// series ("holdline tcp"); one per mechanism in the lab's plots,
/// and for `tcp-overload`'s and `feedback`'s series ("ICS+BM+SF, 3 SEs") one hue per
/// mechanism, lighter with more SEs.
fn color_for(name: &str) -> RGBColor {
    // `sim agree`: a measured series ("occ, 3 SE: real") in a lighter shade of its
    // simulated one's hue.
    if let Some(sim) = name.strip_suffix(": real") {
        let RGBColor(r, g, b) = color_for(sim);
        let light = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * 0.55) as u8;
        return RGBColor(light(r), light(g), light(b));
    }
    // `lab deoc`: the simulator's prediction ("DEOC (simulated)") in a lighter shade of the
    // measured series' hue.
    if let Some(real) = name.strip_suffix(" (simulated)") {
        let RGBColor(r, g, b) = color_for(real);
        let light = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * 0.55) as u8;
        return RGBColor(light(r), light(g), light(b));
    }
    let n = name.to_ascii_lowercase();
    if let Some(c) = link_color(&n) {
        return c;
    }
    let register = n.contains("register") || n.contains(" tcp");
    for (prefix, (r, g, b)) in [
        ("no control,", (214u8, 39u8, 40u8)),
        ("ics+", (0, 94, 184)),
        ("ecs+", (44, 160, 44)),
        ("holdline defaults,", (148, 103, 189)),
        // `feedback`'s series ("RFC 7339 loss, 3 SEs").
        ("local occ,", (0, 94, 184)),
        ("rfc 7339 loss,", (255, 127, 14)),
        ("rfc 7415 rate,", (44, 160, 44)),
    ] {
        if n.starts_with(prefix) {
            let ses: u32 = n
                .split(", ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(1);
            // 1 SE: the hue itself; 3: a third towards white; 10 and more: two thirds.
            let mix = match ses {
                0..=1 => 0.0,
                2..=5 => 0.35,
                _ => 0.6,
            };
            let light = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * mix) as u8;
            return RGBColor(light(r), light(g), light(b));
        }
    }
    // The lab's mechanisms, and with new INVITEs on sockets of their own
    // (`ALG+invite-socket…`) a hue of their own.
    if n.contains("+invite-socket") {
        for (prefix, c) in [
            ("none", RGBColor(140, 86, 75)),
            ("occ", RGBColor(44, 160, 44)),
            ("queue-delay", RGBColor(23, 190, 207)),
        ] {
            if n.starts_with(prefix) {
                return c;
            }
        }
        return RGBColor(188, 189, 34);
    }
    for (prefix, c) in [
        // `lab deoc`'s mechanisms, seed 003's names.
        ("no control", RGBColor(214, 39, 40)),
        ("occ-local", RGBColor(0, 94, 184)),
        ("occ-hop", RGBColor(255, 127, 14)),
        ("deoc", RGBColor(44, 160, 44)),
        ("saturation", RGBColor(127, 127, 127)),
        ("none", RGBColor(214, 39, 40)),
        ("queue-limit", RGBColor(255, 127, 14)),
        ("occ", RGBColor(0, 94, 184)),
        ("queue-delay", RGBColor(148, 103, 189)),
        ("capacity", RGBColor(127, 127, 127)),
        // `netem check`: the measurement against the configured value.
        ("netem", RGBColor(0, 94, 184)),
        ("configured", RGBColor(127, 127, 127)),
        // `window`'s series: the delay window, seed 004's own curves, the upstream proxy.
        ("window", RGBColor(44, 160, 44)),
        ("paper: no control", RGBColor(255, 127, 14)),
        ("paper: window", RGBColor(148, 103, 189)),
        ("upstream: window", RGBColor(188, 189, 34)),
        ("upstream", RGBColor(127, 127, 127)),
        // `holb`'s transports.
        ("sctp-ordered", RGBColor(214, 39, 40)),
        ("sctp-unordered", RGBColor(44, 160, 44)),
        ("sctp-streams", RGBColor(148, 103, 189)),
        ("tcp", RGBColor(255, 127, 14)),
        ("udp", RGBColor(127, 127, 127)),
        // `failover`'s timelines: calls, REGISTERs, the kill.
        ("calls placed", RGBColor(127, 127, 127)),
        ("calls answered", RGBColor(0, 94, 184)),
        ("calls failed", RGBColor(214, 39, 40)),
        ("call failovers", RGBColor(255, 127, 14)),
        ("register 2xx", RGBColor(44, 160, 44)),
        ("register failed", RGBColor(148, 103, 189)),
        ("register failovers", RGBColor(188, 189, 34)),
        ("kill -9", RGBColor(0, 0, 0)),
        // `architectures`: the measurement per core count, the paper per platform.
        ("measured, 1 core", RGBColor(0, 94, 184)),
        ("measured, 2 cores", RGBColor(214, 39, 40)),
        ("paper 1×p", RGBColor(140, 180, 230)),
        ("paper 4×p", RGBColor(255, 127, 14)),
        ("paper 1×s", RGBColor(44, 160, 44)),
        ("paper 2×s", RGBColor(148, 103, 189)),
    ] {
        if n.starts_with(prefix) {
            return c;
        }
    }
    // `scaling`'s series: a configuration (`S2P2`) in a hue of its own, its model (`S2P2
    // model`) in the same hue, lighter.
    let config = n.strip_suffix(" model").unwrap_or(&n);
    if config.starts_with('s')
        && config.contains('p')
        && config[1..].bytes().all(|b| b.is_ascii_digit() || b == b'p')
    {
        const HUES: [(u8, u8, u8); 6] = [
            (127, 127, 127),
            (0, 94, 184),
            (214, 39, 40),
            (44, 160, 44),
            (255, 127, 14),
            (148, 103, 189),
        ];
        let digits: u32 = config
            .bytes()
            .filter(u8::is_ascii_digit)
            .map(|b| u32::from(b - b'0'))
            .sum();
        let (r, g, b) = HUES[digits as usize % HUES.len()];
        let mix = if n.ends_with(" model") { 0.55 } else { 0.0 };
        let light = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * mix) as u8;
        return RGBColor(light(r), light(g), light(b));
    }
    // `tcp-fairness`'s series ("offered: SE 2 (share 2)"): a hue per SE, lighter with the
    // RE's default (equal) sharing.
    for (prefix, mix) in [("offered: se ", 0.0), ("equal: se ", 0.5)] {
        if let Some(rest) = n.strip_prefix(prefix) {
            const HUES: [(u8, u8, u8); 4] =
                [(0, 94, 184), (214, 39, 40), (44, 160, 44), (255, 127, 14)];
            let se: usize = rest
                .split(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1);
            let (r, g, b) = HUES[se.saturating_sub(1) % HUES.len()];
            let light = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * mix) as u8;
            return RGBColor(light(r), light(g), light(b));
        }
    }
    // `tcp-buffers`' SE-send sweep ("12.5x, RE receive 1k / application 2k"): a hue per RE
    // setting, lighter at the lower load.
    if let Some((load, setting)) = n.split_once("x, re receive ") {
        let (r, g, b) = match setting {
            s if s.starts_with("default") => (214u8, 39u8, 40u8),
            s if s.ends_with("application 2k") => (0, 94, 184),
            _ => (44, 160, 44),
        };
        let mix = if load == "2.5" { 0.5 } else { 0.0 };
        let light = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * mix) as u8;
        return RGBColor(light(r), light(g), light(b));
    }
    // Series named by their load (`soak`'s "5000 calls/s udp"): a palette colour per name.
    if n.starts_with(|c: char| c.is_ascii_digit()) {
        const PALETTE: [RGBColor; 6] = [
            RGBColor(0, 94, 184),
            RGBColor(214, 39, 40),
            RGBColor(44, 160, 44),
            RGBColor(255, 127, 14),
            RGBColor(148, 103, 189),
            RGBColor(127, 127, 127),
        ];
        let h = n.bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        });
        return PALETTE[h % PALETTE.len()];
    }
    if n.starts_with("kamailio") {
        if register {
            RGBColor(240, 140, 140)
        } else {
            RGBColor(214, 39, 40)
        }
    } else if n.starts_with("holdline-off") {
        RGBColor(44, 160, 44)
    } else if register {
        RGBColor(120, 170, 230)
    } else {
        RGBColor(0, 94, 184)
    }
}

/// `tcp-overload --wan-delay-ms`'s series, named by their link first ("loopback: holdline
/// defaults, 1 SE", "20 ms: ICS+BM+SF, 3 SEs"): one hue per link (loopback black, each delay
/// a hue of its own, one per 20 ms), lighter for the other mechanisms than holdline's defaults and with
/// more SEs.
fn link_color(n: &str) -> Option<RGBColor> {
    let (link, rest) = n.split_once(": ")?;
    let mut mix = 0.0f64;
    let (r, g, b) = if link == "loopback" {
        (40u8, 40u8, 40u8)
    } else {
        // "20 ms", or "20 ms cubic" (a congestion control named: lighter unless BBR).
        let mut words = link.split(' ');
        let ms: f64 = words.next()?.parse().ok()?;
        if words.next() != Some("ms") {
            return None;
        }
        if words.next().is_some_and(|cc| cc != "bbr") {
            mix += 0.3;
        }
        // One hue per 20 ms: 0 ms green, 20 ms blue, 40 ms purple, 60 ms orange, 80 ms red.
        const HUES: [(u8, u8, u8); 6] = [
            (44, 160, 44),
            (0, 94, 184),
            (148, 103, 189),
            (255, 127, 14),
            (214, 39, 40),
            (23, 190, 207),
        ];
        HUES[(ms / 20.0).round() as usize % HUES.len()]
    };
    mix += if rest.starts_with("holdline defaults") {
        0.0
    } else if rest.starts_with("ics+") {
        0.3
    } else if rest.starts_with("ecs+") {
        0.45
    } else {
        0.6
    };
    if !rest.ends_with(", 1 se") {
        mix += 0.2;
    }
    let light = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * mix.min(0.8)) as u8;
    Some(RGBColor(light(r), light(g), light(b)))
}

/// Each series' colour ([`color_for`] its name), except that a series whose colour an
/// earlier one of the chart already has takes the first of a fixed palette no series has (a
/// `sim run --sweep` draws one line per point of one mechanism: same name prefix, same hue).
fn distinct_colors(series: &[Series]) -> Vec<RGBColor> {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    let near = |a: &RGBColor, b: &RGBColor| color_distance(a, b) < DISTINCT;
    let own: Vec<RGBColor> = series.iter().map(|(n, _)| color_for(n)).collect();
    let mut out: Vec<RGBColor> = Vec::with_capacity(own.len());
    for &c in &own {
        let pick = if out.contains(&c) {
            PALETTE
                .iter()
                .copied()
                .find(|p| !out.iter().chain(&own).any(|u| near(p, u)))
                .unwrap_or(c)
        } else {
            c
        };
        out.push(pick);
    }
    out
}

/// Two colours closer than this ([`color_distance`]) are too alike to tell apart on a line.
const DISTINCT: u32 = 90;

/// The sum of the channel differences of two colours.
fn color_distance(a: &RGBColor, b: &RGBColor) -> u32 {
    u32::from(a.0.abs_diff(b.0)) + u32::from(a.1.abs_diff(b.1)) + u32::from(a.2.abs_diff(b.2))
}

/// One named line of a chart: `(name, [(x, y)])`.
pub type Series = (String, Vec<(f64, f64)>);

/// The vertical error bars of one series: `[(x, low, high)]`.
pub type Intervals = Vec<(f64, f64, f64)>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    intervals: &[Intervals],
) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (xmax, ymax) = pts.fold((1.0f64, 1.0f64), |(x, y), &(a, b)| (x.max(a), y.max(b)));
    let ymax = intervals
        .iter()
        .flatten()
        .fold(ymax, |y, &(_, _, high)| y.max(high));
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..xmax * 1.05, 0.0..ymax * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .x_label_formatter(&|x| {
            if xmax < 10.0 {
                format!("{x:.1}")
            } else {
                format!("{x:.0}")
            }
        })
        .y_label_formatter(&|y| {
            if ymax < 10.0 {
                format!("{y:.2}")
            } else {
                format!("{y:.0}")
            }
        })
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = distinct_colors(series);
    for (i, ((name, p), &color)) in series.iter().zip(&colors).enumerate() {
        if p.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(p.iter().copied(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if let Some(bars) = intervals.get(i) {
            chart
                .draw_series(bars.iter().map(|&(x, low, high)| {
                    ErrorBar::new_vertical(x, low.max(0.0), (low + high) / 2.0, high, color, 10)
                }))
                .map_err(|e| e.to_string())?;
        }
        // A model is a line without measured points.
        if !name.ends_with(" model") {
            chart
                .draw_series(
                    p.iter()
                        .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
                )
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Writes `DIR/NAME.svg` and `DIR/NAME.png`: one line with points per series.
pub fn chart(
    dir: &Path,
    name: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    chart_with_intervals(dir, name, title, x_label, y_label, series, &[])
}

/// As [`chart`], with vertical error bars: `intervals[i]` belongs to `series[i]` (fewer
/// intervals than series: the rest have none).
pub fn chart_with_intervals(
    dir: &Path,
    name: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    intervals: &[Intervals],
) -> Result<()> {
    font()?;
    let svg = dir.join(format!("{name}.svg"));
    let root = SVGBackend::new(&svg, (900, 560)).into_drawing_area();
    draw(&root, title, x_label, y_label, series, intervals).map_err(|reason| LabError::Plot {
        path: svg.clone(),
        reason,
    })?;
    drop(root);
    let png = dir.join(format!("{name}.png"));
    let root = BitMapBackend::new(&png, (900, 560)).into_drawing_area();
    draw(&root, title, x_label, y_label, series, intervals).map_err(|reason| LabError::Plot {
        path: png.clone(),
        reason,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wan_series_are_coloured_by_their_link() {
        let lo = color_for("loopback: holdline defaults, 1 SE");
        let d20 = color_for("20 ms: holdline defaults, 1 SE");
        let d60 = color_for("60 ms: holdline defaults, 1 SE");
        assert!(lo != d20 && d20 != d60 && lo != d60);
        assert!(color_for("20 ms: holdline defaults, 3 SEs") != d20);
        assert!(color_for("20 ms: ICS+BM+SF, 1 SE") != d20);
        assert!(color_for("20 ms cubic: holdline defaults, 1 SE") != d20);
        assert_eq!(color_for("20 ms bbr: holdline defaults, 1 SE"), d20);
        // Other series with a colon keep their colours.
        assert_eq!(color_for("paper: window"), RGBColor(148, 103, 189));
    }

    #[test]
    fn fairness_and_buffer_series_get_colours_of_their_own() {
        let names = [
            "offered: SE 1 (share 3)",
            "offered: SE 2 (share 2)",
            "offered: SE 3 (share 1)",
            "equal: SE 1 (share 3)",
            "equal: SE 2 (share 2)",
            "equal: SE 3 (share 1)",
        ];
        let colours: Vec<RGBColor> = names.iter().map(|n| color_for(n)).collect();
        for (i, a) in colours.iter().enumerate() {
            for b in &colours[i + 1..] {
                assert_ne!(a, b, "{names:?}");
            }
        }
        let sweep = [
            "12.5x, RE receive 1k / application 2k",
            "12.5x, RE receive 1k / application 64k",
            "12.5x, RE receive default / application 2k",
            "2.5x, RE receive 1k / application 2k",
        ];
        let colours: Vec<RGBColor> = sweep.iter().map(|n| color_for(n)).collect();
        for (i, a) in colours.iter().enumerate() {
            for b in &colours[i + 1..] {
                assert_ne!(a, b, "{sweep:?}");
            }
        }
    }

    #[test]
    fn series_of_one_hue_get_distinct_colours_in_one_chart() {
        let line = |n: &str| (n.to_string(), vec![(1.0, 1.0)]);
        let series = [
            line("occ+deoc,min_rejections=1"),
            line("occ+deoc,min_rejections=2"),
            line("occ+deoc,min_rejections=3"),
            line("none"),
        ];
        let c = distinct_colors(&series);
        assert_eq!(c[0], color_for("occ+deoc,min_rejections=1"));
        assert_eq!(c[3], color_for("none"), "a colour of its own is kept");
        let apart = |a: &RGBColor, b: &RGBColor| color_distance(a, b) >= DISTINCT;
        for (i, a) in c.iter().enumerate() {
            for b in &c[i + 1..] {
                assert!(apart(a, b), "{a:?} ~ {b:?} in {c:?}");
            }
        }
    }

    #[test]
    fn intervals_are_drawn_as_bars() {
        let dir = tempfile::tempdir().expect("tempdir");
        let series = vec![("sctp-ordered".to_string(), vec![(1.0, 260.0), (2.0, 790.0)])];
        chart(dir.path(), "plain", "t", "x", "y", &series).expect("chart");
        let bars = vec![vec![(1.0, 30.0, 490.0), (2.0, 250.0, 1330.0)]];
        chart_with_intervals(dir.path(), "bars", "t", "x", "y", &series, &bars).expect("chart");
        let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).expect("svg");
        let (plain, with) = (read("plain.svg"), read("bars.svg"));
        // Three strokes of the series' colour per bar (the whisker and its two caps).
        let RGBColor(r, g, b) = color_for("sctp-ordered");
        let colour = format!("#{r:02X}{g:02X}{b:02X}");
        let strokes = |s: &str| s.matches(colour.as_str()).count();
        assert!(
            strokes(&with) >= strokes(&plain) + 6,
            "{colour}: {} vs {}",
            strokes(&with),
            strokes(&plain)
        );
    }

    #[test]
    fn writes_svg_and_png() {
        let dir = tempfile::tempdir().expect("tempdir");
        let series = vec![
            ("a".to_string(), vec![(100.0, 90.0), (400.0, 300.0)]),
            ("b".to_string(), vec![]),
        ];
        chart(dir.path(), "t", "title", "x", "y", &series).expect("chart");
        let svg = std::fs::read_to_string(dir.path().join("t.svg")).expect("svg");
        assert!(svg.contains("<svg") && svg.contains("title"));
        let png = std::fs::read(dir.path().join("t.png")).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
}
