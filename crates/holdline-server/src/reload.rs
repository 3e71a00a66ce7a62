//! What a reload (SIGHUP, `holdline ctl reload`) can apply to a running server, and what
//! needs a restart: the comparison of the running configuration with the file's.
//!
//! Live: `domains`, `aliases`, `record_route`, `relay`, `trusted`, `routes`, `hash_routes`,
//! `probing`, the admission controllers' settings of `[overload]` (algorithm and its
//! parameters, `retry_after_s`, `register_retry_after_s`, smart forwarding's threshold and
//! hold, the emulated costs), `[flood]`, `log`, `drain_grace_s`, `drain_idle_ms`; the users
//! file's content and RFC 7200's published filters have hooks of their own. Everything else
//! (listeners, workers, store, limits, timers, TLS, ...) is reported as needing a restart
//! and keeps its running value.

use crate::ServerConfig;

/// The outcome of comparing the running configuration with a reloaded one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// The keys whose new value is applied live.
    pub live: Vec<String>,
    /// The keys whose new value needs a restart (their running value stays).
    pub restart: Vec<String>,
}

/// The overload settings that cannot change without a restart, by key.
fn overload_restart(a: &ServerConfig, b: &ServerConfig, out: &mut Vec<String>) {
    let (x, y) = (&a.overload, &b.overload);
    let fields: [(&str, bool); 15] = [
        (
            "overload.smart_forwarding",
            x.smart_forwarding_mode() != y.smart_forwarding_mode(),
        ),
        (
            "overload.defer_new_invites",
            x.defers_new_invites() != y.defers_new_invites(),
        ),
        (
            "overload.defer_max_wait_ms",
            x.defer_max_wait_ms != y.defer_max_wait_ms,
        ),
        (
            "overload.defer_fairness",
            x.defer_fairness != y.defer_fairness,
        ),
        (
            "overload.defer_poll_quantum_ms",
            x.defer_poll_quantum_ms != y.defer_poll_quantum_ms,
        ),
        (
            "overload.defer_poll_max_hold_ms",
            x.defer_poll_max_hold_ms != y.defer_poll_max_hold_ms,
        ),
        (
            "overload.udp_invite_socket",
            x.separates_udp_invites() != y.separates_udp_invites(),
        ),
        (
            "overload.udp_invite_recv_buffer",
            x.udp_invite_recv_buffer != y.udp_invite_recv_buffer,
        ),
        (
            "overload.rejection_budget",
            x.rejection_budget != y.rejection_budget,
        ),
        ("overload.feedback", x.feedback != y.feedback),
        (
            "overload.feedback_answer",
            x.feedback_answer != y.feedback_answer,
        ),
        (
            "overload.advertise_offered_load",
            x.advertise_offered_load != y.advertise_offered_load,
        ),
        (
            "overload.window_threshold_ms",
            x.window_threshold_ms != y.window_threshold_ms,
        ),
        (
            "overload.window_*",
            x.window_decrease != y.window_decrease
                || x.window_once_per_round != y.window_once_per_round
                || x.window_delay != y.window_delay,
        ),
        (
            "overload.feedback_*",
            x.feedback_target_delay_ms != y.feedback_target_delay_ms
                || x.feedback_validity_ms != y.feedback_validity_ms
                || x.feedback_answer_rate != y.feedback_answer_rate
                || x.feedback_answer_window != y.feedback_answer_window
                || x.feedback_window_delay_ms != y.feedback_window_delay_ms
                || x.feedback_rate_tolerance != y.feedback_rate_tolerance
                || x.defer_poll_open_after_ms != y.defer_poll_open_after_ms,
        ),
    ];
    out.extend(
        fields
            .iter()
            .filter(|(_, changed)| *changed)
            .map(|(k, _)| (*k).to_owned()),
    );
}

/// Compares the running configuration `old` with the reloaded `new`. `dns_running`: whether
/// the server started its DNS resolver (routes to DNS names need it; without it, a first
/// DNS-named route needs a restart).
pub fn plan(old: &ServerConfig, new: &ServerConfig, dns_running: bool) -> ReloadPlan {
    let mut p = ReloadPlan::default();
    let mut live = |k: &str, changed: bool| {
        if changed {
            p.live.push(k.to_owned());
        }
    };
    live("domains", old.domains != new.domains);
    live("aliases", old.aliases != new.aliases);
    live("record_route", old.record_route != new.record_route);
    live("relay", old.relay != new.relay);
    live("trusted", old.trusted != new.trusted);
    live("routes", old.routes != new.routes);
    live("hash_routes", old.hash_routes != new.hash_routes);
    live("probing", old.probing != new.probing);
    live("flood", old.flood != new.flood);
    live("log", old.log != new.log);
    live("drain_grace_s", old.drain_grace_s != new.drain_grace_s);
    live("drain_idle_ms", old.drain_idle_ms != new.drain_idle_ms);
    live(
        "load_control.filters",
        old.load_control.filters != new.load_control.filters,
    );
    let mut restart = Vec::new();
    overload_restart(old, new, &mut restart);
    if old.overload != new.overload && restart.is_empty() {
        p.live.push("overload".to_owned());
    }
    let mut need = |k: &str, changed: bool| {
        if changed {
            restart.push(k.to_owned());
        }
    };
    need("listen", old.listen != new.listen);
    need("workers", old.worker_count() != new.worker_count());
    need("store", old.store() != new.store());
    need("durability", old.durability != new.durability);
    need(
        "commit_window_us",
        old.commit_window_us != new.commit_window_us,
    );
    need("data_dir", old.data_dir() != new.data_dir());
    need("metrics", old.metrics != new.metrics);
    need("log_format", old.log_format != new.log_format);
    need(
        "shutdown_grace_ms",
        old.shutdown_grace_ms != new.shutdown_grace_ms,
    );
    need("ctl_socket", old.ctl_socket_path() != new.ctl_socket_path());
    need("limits", old.limits != new.limits);
    need("timers", old.timers != new.timers);
    need("registrar", old.registrar != new.registrar);
    need("mode", old.mode != new.mode);
    need(
        "record_route_host",
        old.record_route_host != new.record_route_host,
    );
    need(
        "propagate_registrations",
        old.propagate_registrations != new.propagate_registrations,
    );
    need("tcp_buffers", old.tcp_buffers != new.tcp_buffers);
    need("tls", old.tls != new.tls);
    need("sctp", old.sctp != new.sctp);
    need("dns", old.dns != new.dns);
    need("auth", old.auth != new.auth);
    let named = |c: &ServerConfig| {
        c.dns.request_uris
            || c.routes
                .iter()
                .any(|r| matches!(r.target, crate::RouteTarget::Dns(_)))
            || c.hash_routes.iter().any(|r| {
                r.targets
                    .iter()
                    .any(|t| matches!(t, crate::RouteTarget::Dns(_)))
            })
    };
    need(
        "routes (a first DNS-named target: the resolver starts with the server)",
        !dns_running && named(new),
    );
    let mut lc_old = old.load_control.clone();
    lc_old.filters.clone_from(&new.load_control.filters);
    need("load_control", lc_old != new.load_control);
    // Anything not named above (a section added later) is never applied silently.
    let mut patched = old.clone();
    apply_live(&mut patched, new);
    if restart.is_empty() && patched != *new {
        restart.push("(other settings)".to_owned());
    }
    p.restart = restart;
    p
}

/// Copies the live part of `new` into `running` (what a reload applies).
pub fn apply_live(running: &mut ServerConfig, new: &ServerConfig) {
    running.domains.clone_from(&new.domains);
    running.aliases.clone_from(&new.aliases);
    running.record_route = new.record_route;
    running.relay.clone_from(&new.relay);
    running.trusted.clone_from(&new.trusted);
    running.routes.clone_from(&new.routes);
    running.hash_routes.clone_from(&new.hash_routes);
    running.probing = new.probing;
    running.flood = new.flood.clone();
    running.log.clone_from(&new.log);
    running.drain_grace_s = new.drain_grace_s;
    running.drain_idle_ms = new.drain_idle_ms;
    running
        .load_control
        .filters
        .clone_from(&new.load_control.filters);
    let mut restart = Vec::new();
    overload_restart(running, new, &mut restart);
    if restart.is_empty() {
        running.overload = new.overload.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> ServerConfig {
        ServerConfig::from_toml("t.toml", text).expect("config")
    }

    #[test]
    fn routes_and_overload_are_live_listeners_need_a_restart() {
        let old = cfg(
            "listen = [\"udp:127.0.0.1:5060\"]\n[[routes]]\ndomain = \"*\"\ntarget = \"udp:127.0.0.1:5070\"\n",
        );
        let new = cfg(
            "listen = [\"udp:127.0.0.1:5061\"]\n[[routes]]\ndomain = \"*\"\ntarget = \"udp:127.0.0.1:5071\"\n[overload]\ntarget_occupancy = 0.8\n",
        );
        let p = plan(&old, &new, false);
        assert_eq!(p.live, ["routes", "overload"]);
        assert_eq!(p.restart, ["listen"]);
        let mut running = old.clone();
        apply_live(&mut running, &new);
        assert_eq!(running.routes, new.routes);
        assert_eq!(running.listen, old.listen, "the listeners stay");
        assert!((running.overload.target_occupancy - 0.8).abs() < 1e-9);
    }

    #[test]
    fn a_structural_overload_change_keeps_the_running_overload_settings() {
        let old = cfg("");
        let new = cfg("[overload]\nudp_invite_socket = false\ntarget_occupancy = 0.7\n");
        let p = plan(&old, &new, false);
        assert!(p.live.is_empty(), "{p:?}");
        assert_eq!(p.restart, ["overload.udp_invite_socket"]);
        let mut running = old.clone();
        apply_live(&mut running, &new);
        assert_eq!(running.overload, old.overload);
    }

    #[test]
    fn an_unchanged_file_changes_nothing() {
        let c = cfg("domains = [\"example.com\"]\n");
        assert_eq!(plan(&c, &c.clone(), false), ReloadPlan::default());
    }
}
