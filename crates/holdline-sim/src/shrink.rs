//! The shrinker of `holdline sim check --shrink`: reduces a failing scenario to a smaller one
//! that still fails with the same kind of violation.
//!
//! It works on the scenario's TOML document: each candidate reduction — a fault removed, a
//! proxy taken out of the chain, fewer phones or users, a shorter load, a lower rate, a
//! perfect link, a callee that answers at once — is applied to the current scenario; the
//! result is kept when it still loads and its run still reports a violation of the kind the
//! original reported ([`violation_kind`]). Passes over the candidates repeat until none is
//! kept or the run budget is spent. Pure: the caller runs the scenarios.

use crate::scenario::Scenario;

/// The kind of a violation message (what a reduction must keep failing with).
pub fn violation_kind(v: &str) -> &'static str {
    if v.contains("(a leak)") || v.contains("timers still firing") {
        "leak"
    } else if v.contains("(a lost binding)") {
        "lost binding"
    } else if v.contains("(a resurrected binding)") {
        "resurrected binding"
    } else if v.contains("sent to its own address") {
        "own address"
    } else if v.contains("(in-dialog)") {
        "in-dialog rejection"
    } else if v.contains("controller output out of bounds") {
        "controller output"
    } else {
        "other"
    }
}

/// What a shrink found.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The reduced scenario (TOML; the input itself when nothing could be removed).
    pub text: String,
    /// The kind of violation it keeps.
    pub kind: &'static str,
    /// Its violations.
    pub violations: Vec<String>,
    /// Runs spent (the original's included).
    pub runs: u32,
    /// Reductions kept.
    pub kept: u32,
}

/// Why a scenario could not be shrunk.
#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    /// The input does not parse as TOML or does not load.
    #[error("the scenario does not load: {0}")]
    Load(String),
    /// Its run reports no violation: nothing to keep.
    #[error("the scenario passes: nothing to shrink")]
    Passes,
}

type Table = toml::Table;

/// Shrinks `text` (a scenario that fails) within `max_runs` runs of `run`, which runs a
/// scenario with the invariants checked and returns its violations.
pub fn shrink(
    text: &str,
    max_runs: u32,
    mut run: impl FnMut(&Scenario) -> Vec<String>,
) -> Result<Shrunk, ShrinkError> {
    let doc: Table = toml::from_str(text).map_err(|e| ShrinkError::Load(e.to_string()))?;
    let sc = load(&doc).ok_or_else(|| ShrinkError::Load("refused".into()))?;
    let violations = run(&sc);
    let Some(kind) = violations.first().map(|v| violation_kind(v)) else {
        return Err(ShrinkError::Passes);
    };
    let mut best = Shrunk {
        text: text.to_string(),
        kind,
        violations,
        runs: 1,
        kept: 0,
    };
    let mut cur = doc;
    loop {
        let mut progress = false;
        for cand in candidates(&cur) {
            if best.runs >= max_runs {
                return Ok(best);
            }
            let Some(sc) = load(&cand) else { continue };
            best.runs += 1;
            let v = run(&sc);
            if v.iter().any(|v| violation_kind(v) == kind) {
                best.violations = v;
                best.kept += 1;
                best.text = toml::to_string(&cand).unwrap_or_default();
                cur = cand;
                progress = true;
                // Candidates are computed from the current scenario: start a new pass.
                break;
            }
        }
        if !progress {
            return Ok(best);
        }
    }
}

fn load(doc: &Table) -> Option<Scenario> {
    let text = toml::to_string(doc).ok()?;
    Scenario::from_toml("shrink.toml", &text).ok()
}

fn array<'a>(doc: &'a Table, key: &str) -> &'a [toml::Value] {
    doc.get(key)
        .and_then(toml::Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn float(v: Option<&toml::Value>) -> Option<f64> {
    match v? {
        toml::Value::Float(f) => Some(*f),
        toml::Value::Integer(i) => Some(*i as f64),
        _ => None,
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Every reduction of `doc` worth a run, biggest first.
fn candidates(doc: &Table) -> Vec<Table> {
    let mut out = Vec::new();
    // Whole fault entries, one at a time.
    for key in ["crashes", "partitions", "clock_jumps", "phones"] {
        for i in 0..array(doc, key).len() {
            let mut d = doc.clone();
            if let Some(a) = d.get_mut(key).and_then(toml::Value::as_array_mut) {
                a.remove(i);
                if a.is_empty() {
                    d.remove(key);
                }
            }
            out.push(d);
        }
    }
    // Registrars nobody registers with any more.
    if array(doc, "phones").is_empty() && !array(doc, "registrars").is_empty() {
        let mut d = doc.clone();
        d.remove("registrars");
        out.push(d);
    }
    // A proxy out of the chain: its upstream's route and the callers go to its next hop.
    let servers: Vec<String> = array(doc, "servers")
        .iter()
        .filter_map(|s| s.get("name")?.as_str().map(str::to_owned))
        .collect();
    if servers.len() > 1 {
        for name in &servers {
            if let Some(d) = without_server(doc, name) {
                out.push(d);
            }
        }
    }
    // Fields of entries: removed, or set to their simplest value.
    let entry_edits: &[(&str, &str, Option<toml::Value>)] = &[
        ("registrars", "crash_at_s", None),
        ("uas", "silent_from_s", None),
        ("uas", "status", Some(toml::Value::Integer(200))),
        ("uas", "ring_ms", Some(toml::Value::Integer(0))),
        ("uas", "answer_ms", Some(toml::Value::Integer(0))),
        ("uac", "cancel_after_ms", None),
        ("uac", "hold_ms", Some(toml::Value::Integer(0))),
        ("phones", "deregister_every", None),
        ("phones", "refresh_s", None),
        ("servers", "feedback", None),
    ];
    for (table, key, value) in entry_edits {
        for i in 0..array(doc, table).len() {
            let mut d = doc.clone();
            let Some(e) = d
                .get_mut(*table)
                .and_then(toml::Value::as_array_mut)
                .and_then(|a| a.get_mut(i))
                .and_then(toml::Value::as_table_mut)
            else {
                continue;
            };
            let changed = match value {
                None => e.remove(*key).is_some(),
                Some(v) => {
                    e.get(*key).is_some_and(|old| old != v) && {
                        e.insert((*key).to_string(), v.clone());
                        true
                    }
                }
            };
            // A de-registration needs refreshes: both go together.
            if *key == "refresh_s" {
                e.remove("deregister_every");
            }
            if changed {
                out.push(d);
            }
        }
    }
    // A perfect link.
    if let Some(l) = doc.get("default_link").and_then(toml::Value::as_table) {
        for key in ["loss", "loss_correlation", "duplicate", "jitter_ms"] {
            if l.contains_key(key) {
                let mut d = doc.clone();
                if let Some(l) = d
                    .get_mut("default_link")
                    .and_then(toml::Value::as_table_mut)
                {
                    l.remove(key);
                    if key == "loss" {
                        l.remove("loss_correlation");
                    }
                }
                out.push(d);
            }
        }
    }
    // Less: a shorter load, fewer users, lower rates.
    if let Some(dur) = float(doc.get("duration_s")).filter(|d| *d > 0.5) {
        let mut d = doc.clone();
        d.insert(
            "duration_s".into(),
            toml::Value::Float(round3((dur / 2.0).max(0.5))),
        );
        out.push(d);
    }
    for i in 0..array(doc, "phones").len() {
        for (key, min) in [("users", 1.0), ("rate", 1.0)] {
            let mut d = doc.clone();
            let Some(e) = d
                .get_mut("phones")
                .and_then(toml::Value::as_array_mut)
                .and_then(|a| a.get_mut(i))
                .and_then(toml::Value::as_table_mut)
            else {
                continue;
            };
            let Some(v) = float(e.get(key)).filter(|v| *v > min) else {
                continue;
            };
            let half = (v / 2.0).max(min);
            e.insert(
                key.into(),
                if key == "users" {
                    toml::Value::Integer(half.floor() as i64)
                } else {
                    toml::Value::Float(round3(half))
                },
            );
            out.push(d);
        }
    }
    for i in 0..array(doc, "uac").len() {
        let mut d = doc.clone();
        let Some(steps) = d
            .get_mut("uac")
            .and_then(toml::Value::as_array_mut)
            .and_then(|a| a.get_mut(i))
            .and_then(|u| u.get_mut("steps"))
            .and_then(toml::Value::as_array_mut)
        else {
            continue;
        };
        let mut changed = false;
        for s in steps.iter_mut().filter_map(toml::Value::as_table_mut) {
            if let Some(r) = float(s.get("rate_cps")).filter(|r| *r > 1.0) {
                s.insert(
                    "rate_cps".into(),
                    toml::Value::Float(round3((r / 2.0).max(1.0))),
                );
                changed = true;
            }
        }
        if changed {
            out.push(d);
        }
    }
    out
}

/// `doc` without server `name`: the routes to it go to where its own route went, callers
/// that called it call that node; `None` when something else names it (a fault, a
/// registrar) or it has no single next hop.
fn without_server(doc: &Table, name: &str) -> Option<Table> {
    let routes = array(doc, "routes");
    let own: Vec<&toml::Value> = routes
        .iter()
        .filter(|r| r.get("server").and_then(toml::Value::as_str) == Some(name))
        .collect();
    let [route] = own.as_slice() else {
        return None;
    };
    let next = route.get("to")?.as_str()?.to_owned();
    if next.is_empty() {
        return None;
    }
    let mut d = doc.clone();
    if let Some(a) = d.get_mut("servers").and_then(toml::Value::as_array_mut) {
        a.retain(|s| s.get("name").and_then(toml::Value::as_str) != Some(name));
    }
    if let Some(a) = d.get_mut("routes").and_then(toml::Value::as_array_mut) {
        a.retain(|r| r.get("server").and_then(toml::Value::as_str) != Some(name));
        for r in a.iter_mut().filter_map(toml::Value::as_table_mut) {
            if r.get("to").and_then(toml::Value::as_str) == Some(name) {
                r.insert("to".into(), toml::Value::String(next.clone()));
            }
        }
    }
    if let Some(a) = d.get_mut("uac").and_then(toml::Value::as_array_mut) {
        for u in a.iter_mut().filter_map(toml::Value::as_table_mut) {
            if u.get("target").and_then(toml::Value::as_str) == Some(name) {
                u.insert("target".into(), toml::Value::String(next.clone()));
            }
        }
    }
    // Anything else that names it makes the result fail to load: skipped by the caller.
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::World;

    #[test]
    fn kinds_of_violations() {
        assert_eq!(
            violation_kind("server p0: 3 transactions left 400s after the run ended (a leak)"),
            "leak"
        );
        assert_eq!(
            violation_kind(
                "t=1 s: registrar p0: ... is not in its store after its restart (a lost binding)"
            ),
            "lost binding"
        );
        assert_eq!(violation_kind("whatever"), "other");
    }

    /// A seed made to fail deterministically — its registrar restarts without its store
    /// (`World::lose_stores_on_crash`), so acknowledged bindings are lost — shrinks to a
    /// scenario that still fails the same way and is strictly smaller.
    #[test]
    fn a_failing_seed_shrinks_to_a_smaller_scenario_that_still_fails() {
        // Seed 3: registrations and a registrar crash.
        let text = crate::check::random_scenario(3);
        assert!(text.contains("crash_at_s"), "{text}");
        let run = |sc: &Scenario| {
            World::new(sc, 0)
                .expect("world")
                .check_invariants()
                .lose_stores_on_crash()
                .run(|_| {})
                .violations
        };
        let out = shrink(&text, 60, run).expect("shrinks");
        assert_eq!(out.kind, "lost binding");
        assert!(out.kept > 0 && out.runs <= 60, "{out:?}");
        let small = Scenario::from_toml("s.toml", &out.text).expect("loads");
        let big = Scenario::from_toml("b.toml", &text).expect("loads");
        let users = |s: &Scenario| s.phones.iter().map(|p| p.users).sum::<u64>();
        assert!(
            users(&small) < users(&big) || small.duration_s < big.duration_s,
            "{}",
            out.text
        );
        // The reduced scenario still fails, the same way, on its own.
        let again = run(&small);
        assert!(
            again.iter().any(|v| violation_kind(v) == "lost binding"),
            "{again:?}"
        );
        // A passing scenario has nothing to shrink.
        let pass = |_: &Scenario| Vec::new();
        assert!(matches!(shrink(&text, 5, pass), Err(ShrinkError::Passes)));
    }
}
