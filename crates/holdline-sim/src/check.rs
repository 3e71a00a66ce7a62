//! Deterministic simulation checking (issue 23 item 3): random scenarios drawn from a seed —
//! a chain of one to three proxies, local overload control or none, hop-by-hop feedback, a
//! callee that answers, fails or goes silent, callers that CANCEL, links with delay, jitter
//! (reordering), duplication and (correlated) loss, load from a fraction of the
//! bottleneck's capacity to several times it, registrations (and de-registrations) with a
//! registrar over a durable store — and faults: partitions that heal, crashes and restarts
//! of any server (a registrar's with or without its store), forward clock jumps — run with
//! the invariants of [`World::check_invariants`] checked; a failure is replayed from its
//! seed alone (`holdline sim check --seed S`, `--print` shows the scenario) and reduced by
//! [`crate::shrink`].
//!
//! Invariants: a server never sends to one of its own addresses, nor a 503 to a request of
//! an admitted call; no leak (every endpoint taken past all its timers, in its own clock);
//! acknowledged bindings durable and acknowledged removals not undone across crashes;
//! controllers' acceptance and occupancy finite and within [0, 1]. The full rules are in
//! `docs/reliability.md`.

use crate::scenario::{Scenario, ScenarioError};
use crate::world::{SimError, World};

/// What one seed's run found.
#[derive(Debug, Clone)]
pub struct CheckOutcome {
    /// The seed.
    pub seed: u64,
    /// Invariant violations (empty: the seed passes).
    pub violations: Vec<String>,
    /// Calls set up end to end.
    pub completed: u64,
    /// SIP messages sent over links.
    pub messages: u64,
    /// Events the engine processed.
    pub events: u64,
    /// 200 OKs to REGISTERs the phones received.
    pub registrations: u64,
    /// Distinct bindings the phones were acknowledged.
    pub acked_bindings: u64,
    /// Server crashes (registrars and others).
    pub crashes: u64,
    /// The faults the scenario drew.
    pub faults: Faults,
    /// Datagrams lost to partitions.
    pub partition_drops: u64,
    /// Messages dropped by silent callees.
    pub silent_drops: u64,
    /// De-registrations the phones were acknowledged.
    pub deregistrations: u64,
    /// Acknowledged bindings a restart without its store suspended the check of.
    pub forgiven_bindings: u64,
}

/// The faults of a scenario, by kind (what `holdline sim check` counts per kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Links lossy, duplicating or jittered by more than 1 ms (the default link).
    pub lossy_links: u64,
    /// Partitions that heal.
    pub partitions: u64,
    /// Crashes of servers that are not registrars.
    pub proxy_crashes: u64,
    /// Crashes of registrars (with their store).
    pub registrar_crashes: u64,
    /// Restarts of registrars without their store.
    pub new_disks: u64,
    /// Clock jumps.
    pub clock_jumps: u64,
    /// Callees that go silent.
    pub silent_callees: u64,
    /// Callees that answer every INVITE with an error (486, 503, 500, 404).
    pub failing_callees: u64,
    /// Phone populations that de-register some users.
    pub deregistering_phones: u64,
}

impl Faults {
    /// The faults of `sc`.
    pub fn of(sc: &Scenario) -> Self {
        let reg = |name: &str| sc.registrars.iter().any(|r| r.server == name);
        let l = &sc.default_link;
        Self {
            lossy_links: u64::from(l.loss > 0.0 || l.duplicate > 0.0 || l.jitter_ms > 1.0),
            partitions: sc.partitions.len() as u64,
            proxy_crashes: sc.crashes.iter().filter(|c| !reg(&c.server)).count() as u64,
            registrar_crashes: (sc
                .registrars
                .iter()
                .filter(|r| r.crash_at_s.is_some())
                .count()
                + sc.crashes
                    .iter()
                    .filter(|c| reg(&c.server) && !c.new_disk)
                    .count()) as u64,
            new_disks: sc.crashes.iter().filter(|c| c.new_disk).count() as u64,
            clock_jumps: sc.clock_jumps.len() as u64,
            silent_callees: sc.uas.iter().filter(|u| u.silent_from_s.is_some()).count() as u64,
            failing_callees: sc.uas.iter().filter(|u| u.status >= 300).count() as u64,
            deregistering_phones: sc
                .phones
                .iter()
                .filter(|p| p.deregister_every.is_some())
                .count() as u64,
        }
    }

    /// Each kind with its count, in the order `holdline sim check` reports them.
    pub fn kinds(&self) -> [(&'static str, u64); 9] {
        [
            ("lossy links", self.lossy_links),
            ("partitions", self.partitions),
            ("proxy crashes", self.proxy_crashes),
            ("registrar crashes", self.registrar_crashes),
            ("restarts without store", self.new_disks),
            ("clock jumps", self.clock_jumps),
            ("silent callees", self.silent_callees),
            ("failing callees", self.failing_callees),
            ("de-registering phones", self.deregistering_phones),
        ]
    }

    /// Whether any fault beyond the links' was drawn.
    pub fn any_new(&self) -> bool {
        self.partitions
            + self.proxy_crashes
            + self.registrar_crashes
            + self.new_disks
            + self.clock_jumps
            + self.silent_callees
            + self.failing_callees
            + self.deregistering_phones
            > 0
    }
}

/// Why a seed could not be checked (a generator bug: every generated scenario must load).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The generated scenario was refused.
    #[error("seed {seed}: the generated scenario does not load: {source}")]
    Scenario {
        /// The seed.
        seed: u64,
        /// Why.
        source: ScenarioError,
    },
    /// The world could not be set up.
    #[error("seed {seed}: {source}")]
    World {
        /// The seed.
        seed: u64,
        /// Why.
        source: SimError,
    },
}

/// SplitMix64: the generator's own small, stable random source (a scenario must stay the
/// same for a seed across versions of other crates).
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`, rounded to 3 decimals (readable scenarios).
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        ((lo + (hi - lo) * self.unit()) * 1000.0).round() / 1000.0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// The scenario of `seed`, as TOML (what `holdline sim check --seed S --print` shows; load
/// it with [`Scenario::from_toml`]).
pub fn random_scenario(seed: u64) -> String {
    let mut d = Draw(seed);
    let proxies = 1 + (d.next() % 3) as usize;
    let mut t = format!(
        "# holdline sim check --seed {seed}\nname = \"check-{seed}\"\nseed = {seed}\nruns = 1\n"
    );
    let duration = d.range(3.0, 12.0);
    t += &format!("duration_s = {duration}\ndrain_s = 40\nsettle_s = 0\n");
    // The last proxy is the bottleneck; the others are cheap.
    let bottleneck_us = d.range(100.0, 2000.0);
    for i in 0..proxies {
        let last = i + 1 == proxies;
        let local = d.pick(&["none", "occ", "occ", "queue-limit"]);
        let service = if last {
            bottleneck_us
        } else {
            d.range(20.0, 200.0)
        };
        t += &format!(
            "[[servers]]\nname = \"p{i}\"\nlocal = \"{local}\"\nservice_us = {service}\nqueue = {}\n",
            16 + d.next() % 512
        );
        if !last && local == "occ" && d.chance(0.5) {
            t += "feedback = \"loss\"\n";
        }
    }
    let status = if d.chance(0.8) {
        200
    } else {
        *[486u16, 503, 500, 404]
            .get((d.next() % 4) as usize)
            .unwrap_or(&486)
    };
    t += &format!(
        "[[uas]]\nname = \"uas\"\nstatus = {status}\nring_ms = {}\nanswer_ms = {}\n",
        d.range(0.0, 50.0),
        d.range(0.0, 200.0)
    );
    // Messages per call at the bottleneck ≈ 7: its capacity in calls/s.
    let capacity = 1e6 / (7.0 * bottleneck_us);
    let factor = d.range(0.2, 5.0);
    let arrivals = d.pick(&["poisson", "constant"]);
    t += &format!(
        "[[uac]]\nname = \"uac\"\ntarget = \"p0\"\narrivals = \"{arrivals}\"\nhold_ms = {}\nsteps = [{{ at_s = 0, rate_cps = {} }}]\n",
        d.range(0.0, 500.0),
        ((capacity * factor).max(1.0) * 10.0).round() / 10.0
    );
    // Callers that give up on slow calls: CANCELs racing 180s, 200s and 487s.
    if d.chance(0.4) {
        t += &format!("cancel_after_ms = {}\n", d.range(5.0, 300.0));
    }
    for i in 0..proxies {
        let to = if i + 1 == proxies {
            "uas".to_string()
        } else {
            format!("p{}", i + 1)
        };
        t += &format!("[[routes]]\nserver = \"p{i}\"\nto = \"{to}\"\n");
    }
    t += &format!(
        "[default_link]\ndelay_ms = {}\njitter_ms = {}\n",
        d.range(0.05, 20.0),
        d.range(0.0, 5.0)
    );
    if d.chance(0.3) {
        t += &format!("duplicate = {}\n", d.range(0.0, 0.1));
    }
    if d.chance(0.6) {
        let loss = d.range(0.0, 0.1);
        t += &format!("loss = {loss}\n");
        if d.chance(0.5) {
            t += &format!("loss_correlation = {}\n", d.range(0.0, 0.9));
        }
    }
    // Drawn after everything above, so a seed without registrations is the scenario it
    // always was.
    let reg = if d.chance(0.5) {
        let (text, reg) = registrations(&mut d, proxies, duration);
        t += &text;
        Some(reg)
    } else {
        None
    };
    // Then the faults of issue 23 (drawn last as well: a seed that draws none of them and
    // no registrations runs as it did before them).
    t += &faults(&mut d, proxies, duration, reg);
    if let Some(at) = silent_callee(&mut d, duration) {
        t = t.replacen(
            "[[uas]]\nname = \"uas\"\n",
            &format!("[[uas]]\nname = \"uas\"\nsilent_from_s = {at}\n"),
            1,
        );
    }
    t
}

/// A callee that goes silent (15%): from a drawn instant (from the start in a fifth of
/// them) it answers nothing, and the proxies go through Timer B / F and 408.
fn silent_callee(d: &mut Draw, duration: f64) -> Option<f64> {
    if !d.chance(0.15) {
        return None;
    }
    Some(if d.chance(0.2) {
        0.0
    } else {
        d.range(0.0, duration)
    })
}

/// The faults drawn for a chain of `proxies` proxies whose registrar, if any, is `reg`:
/// partitions that heal (30%, a second one in a third of those: one link of the chain or
/// every link of one node, from 0.2 to 8 s, starting during the load); the crash and
/// restart of a proxy that is not the registrar (25%, down 0.2-5 s); a forward clock jump
/// of 0.5-40 s on one server (25%); a registrar's restart without its store (8% of the
/// seeds with a registrar).
fn faults(d: &mut Draw, proxies: usize, duration: f64, reg: Option<usize>) -> String {
    let mut t = String::new();
    // The chain's nodes, in order.
    let mut chain = vec!["uac".to_string()];
    chain.extend((0..proxies).map(|i| format!("p{i}")));
    chain.push("uas".into());
    if d.chance(0.3) {
        let n = if d.chance(0.33) { 2 } else { 1 };
        for _ in 0..n {
            let from = d.range(0.2, duration);
            let until = ((from + d.range(0.2, 8.0)) * 1000.0).round() / 1000.0;
            if d.chance(0.5) {
                let k = (d.next() % (chain.len() as u64 - 1)) as usize;
                t += &format!(
                    "[[partitions]]\nbetween = [\"{}\", \"{}\"]\nfrom_s = {from}\nuntil_s = {until}\n",
                    chain[k],
                    chain[k + 1]
                );
            } else {
                let k = (d.next() % chain.len() as u64) as usize;
                t += &format!(
                    "[[partitions]]\nnode = \"{}\"\nfrom_s = {from}\nuntil_s = {until}\n",
                    chain[k]
                );
            }
        }
    }
    if d.chance(0.25) {
        let others: Vec<usize> = (0..proxies).filter(|&i| Some(i) != reg).collect();
        if !others.is_empty() {
            let p = others[(d.next() % others.len() as u64) as usize];
            t += &format!(
                "[[crashes]]\nserver = \"p{p}\"\nat_s = {}\nrestart_after_s = {}\n",
                d.range(0.2, duration),
                d.range(0.2, 5.0)
            );
        }
    }
    if d.chance(0.25) {
        t += &format!(
            "[[clock_jumps]]\nserver = \"p{}\"\nat_s = {}\njump_s = {}\n",
            d.next() % proxies as u64,
            d.range(0.2, duration + 5.0),
            d.range(0.5, 40.0)
        );
    }
    if let Some(r) = reg
        && d.chance(0.08)
    {
        t += &format!(
            "[[crashes]]\nserver = \"p{r}\"\nat_s = {}\nrestart_after_s = {}\nnew_disk = true\n",
            d.range(0.2, duration),
            d.range(0.2, 5.0)
        );
    }
    t
}

/// Registrations (issue 23): one proxy of the chain is also the registrar of `reg.sim`, over
/// a durable store whose commits take 0.1-405 ms; one or two populations of phones register
/// (20-519 users, 20-200 a second, Expires 60-1059 s) and, in 80% of them, refresh every
/// 0.5-5 s; in 85% of the seeds the registrar crashes during the load and restarts 0.2-10 s
/// later, the commit in flight lost (70%) or landed.
fn registrations(d: &mut Draw, proxies: usize, duration: f64) -> (String, usize) {
    let reg = d.next() % proxies as u64;
    let commit_min = d.range(0.1, 5.0);
    let commit_max = ((commit_min + d.range(0.0, 400.0)) * 1000.0).round() / 1000.0;
    let mut t = format!(
        "[[registrars]]\nserver = \"p{reg}\"\ncommit_min_ms = {commit_min}\ncommit_max_ms = {commit_max}\n"
    );
    if d.chance(0.85) {
        t += &format!(
            "crash_at_s = {}\nrestart_after_s = {}\ninflight_survives = {}\n",
            d.range(0.5, duration),
            d.range(0.2, 10.0),
            d.chance(0.3)
        );
    }
    for k in 0..1 + d.next() % 2 {
        t += &format!(
            "[[phones]]\nname = \"phones{k}\"\nregistrar = \"p{reg}\"\nusers = {}\nrate = {}\nexpires = {}\n",
            20 + d.next() % 500,
            d.range(20.0, 200.0),
            60 + d.next() % 1000
        );
        if d.chance(0.8) {
            t += &format!("refresh_s = {}\n", d.range(0.5, 5.0));
            // De-registrations: every k-th user removes its binding instead of refreshing.
            if d.chance(0.4) {
                t += &format!("deregister_every = {}\n", 1 + d.next() % 5);
            }
        }
    }
    (t, reg as usize)
}

/// Runs the scenario of `seed` with the invariants checked.
pub fn check_seed(seed: u64) -> Result<CheckOutcome, CheckError> {
    let text = random_scenario(seed);
    let sc = Scenario::from_toml(&format!("check-{seed}.toml"), &text)
        .map_err(|source| CheckError::Scenario { seed, source })?;
    check_scenario(seed, &sc, |w| w)
}

/// Runs run 0 of `sc` with the invariants checked (`seed` only names it in the outcome);
/// `tweak` may adjust the world before it runs (the checker's own tests).
pub fn check_scenario(
    seed: u64,
    sc: &Scenario,
    tweak: impl FnOnce(World) -> World,
) -> Result<CheckOutcome, CheckError> {
    let world = World::new(sc, 0)
        .map_err(|source| CheckError::World { seed, source })?
        .check_invariants();
    let out = tweak(world).run(|_| {});
    Ok(CheckOutcome {
        seed,
        violations: out.violations,
        completed: out.completed,
        messages: out.messages,
        events: out.events,
        registrations: out.registrations,
        acked_bindings: out.acked_bindings,
        crashes: out.crashes,
        faults: Faults::of(sc),
        partition_drops: out.partition_drops,
        silent_drops: out.silent_drops,
        deregistrations: out.deregistrations,
        forgiven_bindings: out.forgiven_bindings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_scenario_and_every_scenario_loads() {
        assert_eq!(random_scenario(7), random_scenario(7));
        assert_ne!(random_scenario(7), random_scenario(8));
        for seed in 0..200 {
            let text = random_scenario(seed);
            if let Err(e) = Scenario::from_toml("check.toml", &text) {
                panic!("seed {seed}: {e}\n{text}");
            }
        }
    }

    #[test]
    fn the_leak_check_sees_what_the_endpoints_hold() {
        // Right at the end of a run stopped with its load (no drain), with calls in
        // progress and transactions lingering, the check must report them: it reads the
        // endpoints' real state.
        // (Seed 6: no registrar, so no server is down at the end.)
        let text = random_scenario(6).replace("drain_s = 40", "drain_s = 0");
        let sc = Scenario::from_toml("check.toml", &text).expect("loads");
        let out = World::new(&sc, 0)
            .expect("world")
            .check_invariants()
            .leak_horizon(holdline_base::Duration::ZERO)
            .run(|_| {});
        assert!(
            out.violations
                .iter()
                .any(|v| v.contains("transactions left")),
            "{:?}",
            out.violations
        );
    }

    #[test]
    fn a_duplicating_link_delivers_copies_that_the_server_absorbs() {
        let text = |dup: f64| {
            format!(
                "name = \"dup\"\nseed = 5\nruns = 1\nduration_s = 5\ndrain_s = 40\nsettle_s = 0\n\
                 [[servers]]\nname = \"p0\"\nlocal = \"occ\"\nservice_us = 100\n\
                 [[uas]]\nname = \"uas\"\n\
                 [[uac]]\nname = \"uac\"\ntarget = \"p0\"\narrivals = \"constant\"\n\
                 steps = [{{ at_s = 0, rate_cps = 20 }}]\n\
                 [[routes]]\nserver = \"p0\"\nto = \"uas\"\n\
                 [default_link]\nduplicate = {dup}\n"
            )
        };
        let run = |dup: f64| {
            let sc = Scenario::from_toml("dup.toml", &text(dup)).expect("loads");
            World::new(&sc, 0)
                .expect("world")
                .check_invariants()
                .run(|_| {})
        };
        let (plain, doubled) = (run(0.0), run(0.5));
        assert_eq!(plain.completed, 100);
        assert_eq!(doubled.completed, 100, "copies change no call");
        assert!(doubled.violations.is_empty(), "{:?}", doubled.violations);
        let handled = |o: &crate::RunOutput| o.servers[0].1.handled;
        // About half of every message arrives twice.
        assert!(
            handled(&doubled) * 10 > handled(&plain) * 13,
            "{} vs {}",
            handled(&doubled),
            handled(&plain)
        );
        assert!(
            Scenario::from_toml("dup.toml", &text(1.5)).is_err(),
            "duplicate outside [0, 1] refused"
        );
    }

    /// A chain of one proxy that is also the registrar of `reg.sim` (commits 20-150 ms),
    /// 300 phones registering at 150/s and refreshing every second, calls alongside; the
    /// registrar crashes at 1.5 s (mid-registration) and restarts at 3 s.
    fn crash_scenario(extra: &str) -> Scenario {
        let text = format!(
            "name = \"reg\"\nseed = 9\nruns = 1\nduration_s = 6\ndrain_s = 40\nsettle_s = 0\n\
             [[servers]]\nname = \"p0\"\nlocal = \"occ\"\nservice_us = 100\n\
             [[uas]]\nname = \"uas\"\n\
             [[uac]]\nname = \"uac\"\ntarget = \"p0\"\narrivals = \"constant\"\n\
             steps = [{{ at_s = 0, rate_cps = 20 }}]\n\
             [[routes]]\nserver = \"p0\"\nto = \"uas\"\n\
             [[registrars]]\nserver = \"p0\"\ncommit_min_ms = 20\ncommit_max_ms = 150\n\
             crash_at_s = 1.5\nrestart_after_s = 1.5\n{extra}\
             [[phones]]\nname = \"phones\"\nregistrar = \"p0\"\nusers = 300\nrate = 150\n\
             expires = 600\nrefresh_s = 1\n"
        );
        Scenario::from_toml("reg.toml", &text).expect("loads")
    }

    #[test]
    fn a_registrar_crash_keeps_every_acknowledged_binding() {
        let out = World::new(&crash_scenario(""), 0)
            .expect("world")
            .check_invariants()
            .run(|_| {});
        assert!(out.violations.is_empty(), "{:?}", out.violations);
        assert_eq!(out.crashes, 1);
        // Every phone got registered (the ones caught by the crash after their retry), and
        // refreshed: each binding was acknowledged several times.
        assert_eq!(out.acked_bindings, 300);
        assert!(out.registrations > 600, "{}", out.registrations);
        assert!(out.completed > 80, "calls through the restarted proxy too");
        // The check reads the restarted registrar's real store: a restart without its store
        // loses the acknowledged bindings, and the check says so.
        let lost = World::new(&crash_scenario(""), 0)
            .expect("world")
            .check_invariants()
            .lose_stores_on_crash()
            .run(|_| {});
        let n = lost
            .violations
            .iter()
            .filter(|v| v.contains("is not in its store after its restart (a lost binding)"))
            .count();
        assert!(n > 100, "{n}: {:?}", lost.violations.first());
    }

    #[test]
    fn the_commit_in_flight_may_land_or_not_and_nothing_acknowledged_is_lost() {
        for extra in ["inflight_survives = true\n", "inflight_survives = false\n"] {
            let out = World::new(&crash_scenario(extra), 0)
                .expect("world")
                .check_invariants()
                .run(|_| {});
            assert!(out.violations.is_empty(), "{extra}: {:?}", out.violations);
            assert_eq!((out.crashes, out.acked_bindings), (1, 300), "{extra}");
        }
    }

    #[test]
    fn a_registration_seed_replays_identically() {
        // Seed 2 draws registrations and a crash of its registrar.
        assert!(random_scenario(2).contains("crash_at_s"));
        let a = check_seed(2).expect("runs");
        let b = check_seed(2).expect("runs");
        assert!(a.violations.is_empty(), "{:?}", a.violations);
        assert_eq!(a.crashes, 1);
        assert!(a.registrations > 0 && a.acked_bindings > 0);
        let key = |o: &CheckOutcome| {
            (
                o.completed,
                o.messages,
                o.events,
                o.registrations,
                o.acked_bindings,
            )
        };
        assert_eq!(key(&a), key(&b));
    }

    /// One or two proxies (`p0`, `p1`) in a chain to a UAS, 20 calls a second for 10 s,
    /// then `extra`.
    fn chain(proxies: usize, extra: &str) -> Scenario {
        let mut t = String::from(
            "name = \"faults\"\nseed = 3\nruns = 1\nduration_s = 10\ndrain_s = 40\nsettle_s = 0\n",
        );
        for i in 0..proxies {
            t += &format!("[[servers]]\nname = \"p{i}\"\nlocal = \"occ\"\nservice_us = 100\n");
        }
        t += "[[uas]]\nname = \"uas\"\n[[uac]]\nname = \"uac\"\ntarget = \"p0\"\n\
              arrivals = \"constant\"\nsteps = [{ at_s = 0, rate_cps = 20 }]\n";
        for i in 0..proxies {
            let to = if i + 1 == proxies {
                "uas".to_string()
            } else {
                format!("p{}", i + 1)
            };
            t += &format!("[[routes]]\nserver = \"p{i}\"\nto = \"{to}\"\n");
        }
        t += extra;
        Scenario::from_toml("faults.toml", &t).expect("loads")
    }

    fn run_checked(sc: &Scenario) -> crate::RunOutput {
        World::new(sc, 0)
            .expect("world")
            .check_invariants()
            .run(|_| {})
    }

    /// Calls set up (ACKs at the UAS) in the second ending at `t_s`.
    fn completed_in(o: &crate::RunOutput, t_s: u64) -> u64 {
        o.series
            .iter()
            .find(|r| r.t_s == t_s)
            .map_or(0, |r| r.completed)
    }

    #[test]
    fn a_partition_fails_calls_in_its_window_and_none_after() {
        let o = run_checked(&chain(
            1,
            "[[partitions]]\nbetween = [\"p0\", \"uas\"]\nfrom_s = 3\nuntil_s = 5\n",
        ));
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert!(o.partition_drops > 0);
        // Nothing reaches the callee in the window ...
        assert_eq!((completed_in(&o, 4), completed_in(&o, 5)), (0, 0));
        // ... and after it heals (the retransmissions through) every call gets through.
        for t in 8..=10 {
            assert!(
                completed_in(&o, t) >= 19,
                "second {t}: {}",
                completed_in(&o, t)
            );
        }
        // A node partition cuts every link of the node.
        let o = run_checked(&chain(
            2,
            "[[partitions]]\nnode = \"p1\"\nfrom_s = 3\nuntil_s = 5\n",
        ));
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!((completed_in(&o, 4), completed_in(&o, 5)), (0, 0));
        assert!(completed_in(&o, 9) >= 19);
    }

    #[test]
    fn a_proxy_crash_loses_its_calls_and_leaves_no_leak() {
        let plain = run_checked(&chain(2, ""));
        let o = run_checked(&chain(
            2,
            "[[crashes]]\nserver = \"p1\"\nat_s = 3\nrestart_after_s = 1\n",
        ));
        // The leak check reads the restarted endpoint (no violation); nothing gets through
        // while it is down (what reaches it is lost), calls go on after the restart.
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.crashes, 1);
        assert!(o.link_drops > plain.link_drops + 20);
        assert_eq!(completed_in(&o, 4), 0);
        assert!(completed_in(&plain, 4) >= 19);
        assert!(completed_in(&o, 9) >= 19);
        // Without a restart before the end, the proxy would still be down: a crash of
        // a server that is not a registrar has no `new_disk`.
        let text = "[[crashes]]\nserver = \"p1\"\nat_s = 3\nnew_disk = true\n";
        let mut t = String::from(
            "name = \"x\"\nduration_s = 1\n[[servers]]\nname = \"p1\"\nservice_us = 1\n",
        );
        t += text;
        let e = Scenario::from_toml("x.toml", &t).expect_err("no disk");
        assert_eq!((e.key.as_str(), e.line), ("crashes[0].new_disk", 9), "{e}");
    }

    #[test]
    fn a_clock_jump_passes_the_invariants() {
        // The registrar's clock jumps 30 s ahead in the middle of registrations and calls,
        // and it crashes later: its timers fire early, its bindings expire earlier in the
        // others' time; nothing may leak and no acknowledged binding may be lost.
        let sc = crash_scenario("");
        let text = "[[clock_jumps]]\nserver = \"p0\"\nat_s = 1\njump_s = 30\n";
        let mut sc2 = sc.clone();
        sc2.clock_jumps = Scenario::from_toml(
            "j.toml",
            &format!("duration_s = 1\n[[servers]]\nname = \"p0\"\nservice_us = 1\n{text}"),
        )
        .expect("loads")
        .clock_jumps;
        let o = run_checked(&sc2);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.crashes, 1);
        assert!(o.acked_bindings > 250, "{}", o.acked_bindings);
        assert!(o.completed > 80);
        // The jump is real: the same run without it differs.
        let plain = run_checked(&sc);
        assert_ne!(plain.events, o.events);
        let e = Scenario::from_toml(
            "j.toml",
            &format!(
                "duration_s = 1\n[[servers]]\nname = \"p0\"\nservice_us = 1\n{}",
                text.replace("jump_s = 30", "jump_s = -1")
            ),
        )
        .expect_err("backwards");
        assert_eq!(e.key, "clock_jumps[0].jump_s");
    }

    #[test]
    fn a_silent_callee_gives_timeouts_and_no_leak() {
        let o = run_checked(&chain(2, ""));
        assert_eq!(o.silent_drops, 0);
        let mut silent = chain(2, "");
        silent.uas[0].silent_from_s = Some(5.0);
        let o = run_checked(&silent);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert!(o.silent_drops > 0);
        // Calls before 5 s get through; after, none: the last proxy's Timer B ends each
        // and its 408 goes upstream through the first.
        assert!(completed_in(&o, 4) >= 19);
        assert_eq!(completed_in(&o, 7), 0);
        assert!(
            o.servers[0].1.received.r3xx_6xx >= 90,
            "{:?}",
            o.servers[0].1.received
        );
    }

    #[test]
    fn de_registrations_stay_removed_across_a_crash() {
        let mut dereg = crash_scenario("");
        dereg.phones[0].deregister_every = Some(3);
        let o = run_checked(&dereg);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        // Users 0, 3, ..., 297 (100) removed their bindings (acknowledged), the others refreshed.
        // (A few had their first refresh lost to the crash or due after the load.)
        assert!(
            (80..=100).contains(&o.deregistrations),
            "{}",
            o.deregistrations
        );
        assert_eq!(o.crashes, 1);
    }

    #[test]
    fn a_restart_without_its_store_suspends_the_binding_check_only_for_what_it_lost() {
        let mut disk = crash_scenario("");
        let c = Scenario::from_toml(
            "c.toml",
            "duration_s = 1\n[[servers]]\nname = \"p0\"\nservice_us = 1\n[[registrars]]\nserver = \"p0\"\n\
             [[crashes]]\nserver = \"p0\"\nat_s = 1.5\nrestart_after_s = 1.5\nnew_disk = true\n",
        )
        .expect("loads");
        disk.crashes = c.crashes;
        disk.registrars[0].crash_at_s = None;
        let o = run_checked(&disk);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.crashes, 1);
        assert!(o.forgiven_bindings > 100, "{}", o.forgiven_bindings);
        // The phones registered again after it: those bindings are checked (all 300 are
        // acknowledged again, as refreshes continue until the load ends).
        assert_eq!(o.acked_bindings, 300);
    }

    #[test]
    fn seeds_without_registrations_or_faults_run_as_they_always_did() {
        // (seed, calls set up, messages, events): registrations and the faults of issue 23
        // are drawn last, so a seed that draws neither still draws the same scenario and
        // runs the same. (Seeds 1, 7, 10 and 11, which this test ran before, now draw
        // faults.) Measured again on 2026-11-30 after the worker model's short-batch rule
        // (a short batch ends the read, as the server's drained socket does; before it:
        // 2,705 / 53,235 / 74,641, 305 / 4,898 / 8,373, 440 / 5,933 / 9,356, 234 / 24,620 /
        // 40,836, those of `results/2026-11-29-sim-check/check-0-999.json`). Again on
        // 2026-12-03, when a new INVITE became stale by its own turn in the batch and a short
        // batch drained the INVITE queue too, as in the worker (before: 2,694 / 53,254 /
        // 81,863, 303 / 4,951 / 9,287, 456 / 6,093 / 10,203, 295 / 24,733 / 42,048).
        for (seed, completed, messages, events) in [
            (12, 2_678, 53_447, 79_540),
            (25, 306, 4_993, 9_435),
            (46, 466, 6_193, 10_208),
            (53, 305, 24_721, 43_383),
        ] {
            let text = random_scenario(seed);
            let sc = Scenario::from_toml("check.toml", &text).expect("loads");
            assert!(
                sc.registrars.is_empty() && !Faults::of(&sc).any_new(),
                "seed {seed}"
            );
            let o = check_seed(seed).expect("runs");
            assert_eq!(
                (o.completed, o.messages, o.events),
                (completed, messages, events),
                "seed {seed}"
            );
        }
    }

    /// Seeds that failed in the first 300-seed run with the faults: three checker bugs,
    /// each a false "lost binding" (holdline was right each time), kept as regressions.
    #[test]
    fn the_checker_bugs_found_by_the_first_fault_seeds_stay_fixed() {
        for (seed, what) in [
            // A de-registration sent and applied (committed) whose 200 never reached the
            // phone: the binding was still demanded.
            (30, "deregister_every"),
            // A clock jump of the registrar inside a worker iteration: the binding is dated
            // with the time read before the jump; the due expiry assumed the skew after it.
            (13, "[[clock_jumps]]"),
            // A restart without its store: 200s sent just before the crash reached the
            // phones after it, and their bindings were demanded after the restart.
            (151, "new_disk = true"),
        ] {
            assert!(random_scenario(seed).contains(what), "seed {seed}");
            let o = check_seed(seed).expect("runs");
            assert!(
                o.violations.is_empty(),
                "seed {seed}: {:?}",
                o.violations.first()
            );
            assert!(o.acked_bindings > 0, "seed {seed}");
        }
    }

    #[test]
    fn the_seeds_pass_and_replay_identically() {
        for seed in 0..12 {
            let a = check_seed(seed).expect("runs");
            assert!(a.violations.is_empty(), "seed {seed}: {:?}", a.violations);
            let b = check_seed(seed).expect("runs");
            assert_eq!(
                (a.completed, a.messages, a.events),
                (b.completed, b.messages, b.events),
                "seed {seed} replays identically"
            );
        }
    }
}
