//! The egress policy: where the worker may send requests
//! (docs/security.md#egress-where-the-worker-may-connect).
//!
//! Tenants set the agent and platform API URLs, so without it a tenant could aim the worker
//! at loopback or a cloud metadata address. Checked when a URL is saved
//! ([`EgressPolicy::check_url`]) and again when connecting ([`GuardedClient`]), because DNS
//! can change in between.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// The fixed `last_error` of a turn whose agent URL the policy refused at send time.
pub const AGENT_REFUSED: &str = "agent URL refused by the egress policy";
/// The fixed `last_error` of a reply part whose platform API URL the policy refused.
pub const PLATFORM_REFUSED: &str = "platform API URL refused by the egress policy";

const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a URL is refused. Names the rule, never the addresses a name resolved to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("is not a URL")]
    NotAUrl,
    #[error("must be an http or https URL")]
    Scheme,
    #[error("must name a host")]
    NoHost,
    #[error(
        "is a {0} address, which the egress policy refuses (the operator may allow it with CB_EGRESS_ALLOW)"
    )]
    Address(&'static str),
    #[error("resolves to an address the egress policy refuses (loopback, private, link-local, multicast, unspecified or reserved; the operator may allow it with CB_EGRESS_ALLOW)")]
    Resolved,
    #[error("names a host that does not resolve")]
    Unresolvable,
}

/// The operator's allow list on top of "public addresses only". Parsed once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    nets: Vec<IpNet>,
    hosts: Vec<String>,
}

impl EgressPolicy {
    pub fn strict() -> Self {
        Self::default()
    }

    /// Parses `CB_EGRESS_ALLOW`: comma-separated CIDRs, addresses and host names.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut policy = Self::default();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            policy = policy.allowing(entry)?;
        }
        Ok(policy)
    }

    pub fn allowing(mut self, entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        if let Ok(net) = entry.parse::<IpNet>() {
            self.nets.push(net.trunc());
        } else if let Ok(ip) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
            self.nets.push(IpNet::from(ip));
        } else if is_host_name(entry) {
            self.hosts.push(normal_host(entry));
        } else {
            return Err(format!(
                "CB_EGRESS_ALLOW entry {entry:?} is neither a CIDR, an IP address nor a host name"
            ));
        }
        Ok(self)
    }

    pub fn allows_host(&self, host: &str) -> bool {
        let host = normal_host(host);
        self.hosts.contains(&host)
    }

    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refusal> {
        if self.nets.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        match classify(ip) {
            Some(class) => Err(Refusal::Address(class)),
            None => Ok(()),
        }
    }

    /// The checks that need no DNS, before every request: reqwest does not call the resolver
    /// for an IP-literal host, so its address is checked here.
    pub fn check_target(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme);
        }
        match url.host_str() {
            None | Some("") => Err(Refusal::NoHost),
            Some(_) => literal_ip(url).map_or(Ok(()), |ip| self.check_ip(ip)),
        }
    }

    /// The save-time check: every address the host resolves to must be allowed.
    pub async fn check_url(&self, url: &str) -> Result<(), Refusal> {
        let parsed = Url::parse(url).map_err(|_| Refusal::NotAUrl)?;
        self.check_target(&parsed)?;
        let (None, Some(host)) = (literal_ip(&parsed), parsed.host_str()) else {
            return Ok(());
        };
        if self.allows_host(host) {
            return Ok(());
        }
        let addrs = resolve(host).await.map_err(|_| Refusal::Unresolvable)?;
        if addrs.is_empty() {
            return Err(Refusal::Unresolvable);
        }
        if addrs.iter().any(|addr| self.check_ip(addr.ip()).is_err()) {
            return Err(Refusal::Resolved);
        }
        Ok(())
    }
}

/// The address of an IP-literal host (the URL parser already made `2130706433` dotted).
fn literal_ip(url: &Url) -> Option<IpAddr> {
    url.host_str()?.trim_matches(['[', ']']).parse().ok()
}

/// A DNS name; underscores too, which some internal zones use.
fn is_host_name(entry: &str) -> bool {
    !entry.is_empty()
        && entry.len() <= 253
        && entry
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        && entry.chars().any(|c| c.is_ascii_alphabetic())
}

fn normal_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

async fn resolve(host: &str) -> std::io::Result<Vec<SocketAddr>> {
    let lookup = tokio::net::lookup_host((host, 0));
    match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        Ok(addrs) => Ok(addrs?.collect()),
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "DNS timed out")),
    }
}

/// The class of a non-public address (`None`: public). IPv6 forms carrying an IPv4 address
/// are judged by it, so `::ffff:127.0.0.1` is loopback.
pub fn classify(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => classify_v4(ip),
        IpAddr::V6(ip) => match embedded_v4(ip) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(ip),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() || a == 0 => "unspecified",
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_private() => "private",
        _ if ip.is_link_local() => "link-local",
        _ if ip.is_multicast() => "multicast",
        _ if ip.is_broadcast() => "broadcast",
        // 100.64.0.0/10 shared address space (carrier-grade NAT, RFC 6598).
        (100, 64..=127, _) => "shared",
        // 192.0.0.0/24 IETF protocol assignments; 198.18.0.0/15 benchmarking.
        (192, 0, 0) | (198, 18..=19, _) => "reserved",
        _ if ip.is_documentation() => "documentation",
        // 240.0.0.0/4, reserved for future use.
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(match first {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_multicast() => "multicast",
        // fe80::/10 link-local; fec0::/10 the deprecated site-local.
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "private",
        // fc00::/7 unique local addresses.
        0xfc00..=0xfdff => "private",
        // 2001:db8::/32 documentation.
        0x2001 if ip.segments()[1] == 0x0db8 => "documentation",
        // 100::/64 discard-only.
        0x0100 if ip.segments()[1..4] == [0, 0, 0] => "reserved",
        _ => return None,
    })
}

/// The IPv4 address in a mapped, compatible, NAT64 or 6to4 IPv6 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        // `::` and `::1` are themselves, not 0.0.0.0 and 0.0.0.1.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// A remote server's reason cut to 80 printable ASCII characters: it comes from a URL the
/// tenant may have set, so it is never kept whole.
pub fn short_reason(text: &str) -> String {
    const MAX: usize = 80;
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { ' ' })
        .take(MAX + 1)
        .collect();
    let cleaned = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    if cleaned.len() > MAX {
        format!("{}…", &cleaned[..MAX])
    } else {
        cleaned
    }
}

/// A Slack error code as Slack writes them; anything else is not repeated.
pub fn slack_code(code: &str) -> &str {
    let valid = (1..=64).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    if valid {
        code
    } else {
        "unrecognised_error"
    }
}

/// The system's resolver minus refused addresses; fails with a [`Refusal`] when none is left.
pub struct GuardedResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
            if policy.allows_host(host) {
                return Ok(Box::new(addrs.into_iter()) as Addrs);
            }
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|addr| policy.check_ip(addr.ip()).is_ok())
                .collect();
            if allowed.is_empty() {
                tracing::info!(host, "egress policy refused every address of a host");
                return Err(Box::new(Refusal::Resolved) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Why a guarded request did not get an answer.
#[derive(Debug)]
pub enum SendError {
    Refused(Refusal),
    Transport(reqwest::Error),
}

/// The worker's HTTP client: the egress policy at connect time, no redirects, and no proxies
/// (a proxy would resolve names out of the policy's sight).
#[derive(Clone)]
pub struct GuardedClient {
    inner: reqwest::Client,
    policy: Arc<EgressPolicy>,
}

impl GuardedClient {
    pub fn build(builder: reqwest::ClientBuilder, policy: Arc<EgressPolicy>) -> reqwest::Result<Self> {
        let resolver = Arc::new(GuardedResolver {
            policy: Arc::clone(&policy),
        });
        let inner = builder
            .dns_resolver(resolver)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(Self { inner, policy })
    }

    pub fn get<U: reqwest::IntoUrl>(&self, url: U) -> reqwest::RequestBuilder {
        self.inner.get(url)
    }

    pub fn post<U: reqwest::IntoUrl>(&self, url: U) -> reqwest::RequestBuilder {
        self.inner.post(url)
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, SendError> {
        // Errors never carry the URL: a Telegram URL holds the bot token.
        let request = request
            .build()
            .map_err(|err| SendError::Transport(err.without_url()))?;
        if let Err(refusal) = self.policy.check_target(request.url()) {
            tracing::info!(%refusal, "egress policy refused a request URL");
            return Err(SendError::Refused(refusal));
        }
        self.inner
            .execute(request)
            .await
            .map_err(|err| match refusal_in(&err) {
                Some(refusal) => SendError::Refused(refusal),
                None => SendError::Transport(err.without_url()),
            })
    }
}

fn refusal_in(err: &reqwest::Error) -> Option<Refusal> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = source {
        if let Some(refusal) = error.downcast_ref::<Refusal>() {
            return Some(refusal.clone());
        }
        source = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn non_public_ipv4_addresses_are_classified() {
        for (addr, class) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.0.0.1", "private"),
            ("172.16.5.4", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("224.0.0.1", "multicast"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("255.255.255.255", "broadcast"),
            ("100.64.0.1", "shared"),
            ("198.18.0.1", "reserved"),
            ("192.0.2.1", "documentation"),
            ("240.0.0.1", "reserved"),
        ] {
            assert_eq!(classify(ip(addr)), Some(class), "{addr}");
        }
    }

    #[test]
    fn public_addresses_are_not_classified() {
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            assert_eq!(classify(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn non_public_ipv6_addresses_are_classified() {
        for (addr, class) in [
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fd00::1", "private"),
            ("fc00::1", "private"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
        ] {
            assert_eq!(classify(ip(addr)), Some(class), "{addr}");
        }
    }

    #[test]
    fn ipv6_forms_carrying_an_ipv4_address_are_judged_by_it() {
        for (addr, class) in [
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:7f00:1", Some("loopback")),
            ("::ffff:10.0.0.1", Some("private")),
            ("::ffff:169.254.169.254", Some("link-local")),
            ("::127.0.0.1", Some("loopback")),
            ("64:ff9b::a9fe:a9fe", Some("link-local")),
            ("2002:7f00:1::", Some("loopback")),
            ("::ffff:8.8.8.8", None),
        ] {
            assert_eq!(classify(ip(addr)), class, "{addr}");
        }
    }

    #[test]
    fn the_allow_list_takes_cidrs_addresses_and_host_names() {
        let policy = EgressPolicy::parse(" 10.1.0.0/16, 127.0.0.1 ,[::1], agent.internal., ").unwrap();
        assert!(policy.check_ip(ip("10.1.200.3")).is_ok());
        assert_eq!(policy.check_ip(ip("10.2.0.1")), Err(Refusal::Address("private")));
        assert!(policy.check_ip(ip("127.0.0.1")).is_ok());
        assert_eq!(
            policy.check_ip(ip("127.0.0.2")),
            Err(Refusal::Address("loopback"))
        );
        assert!(policy.check_ip(ip("::1")).is_ok());
        assert!(policy.allows_host("Agent.Internal"));
        assert!(!policy.allows_host("other.internal"));
        assert!(EgressPolicy::parse("").unwrap() == EgressPolicy::strict());
    }

    #[test]
    fn allowing_an_ipv4_address_does_not_allow_its_mapped_form() {
        // The mapped form is judged as the IPv4 address, and the allow list is matched on
        // the address as written: allowing 127.0.0.1 does not open ::ffff:127.0.0.1.
        let policy = EgressPolicy::parse("127.0.0.1").unwrap();
        assert_eq!(
            policy.check_ip(ip("::ffff:127.0.0.1")),
            Err(Refusal::Address("loopback"))
        );
    }

    #[test]
    fn malformed_allow_entries_are_rejected_naming_the_setting() {
        for entry in ["10.0.0.0/33", "not a host", "http://x", "1.2.3"] {
            let err = EgressPolicy::parse(entry).unwrap_err();
            assert!(err.contains("CB_EGRESS_ALLOW"), "{entry}: {err}");
        }
    }

    #[test]
    fn request_urls_need_http_and_a_public_literal_address() {
        let strict = EgressPolicy::strict();
        let check = |url: &str| strict.check_target(&Url::parse(url).unwrap());
        assert_eq!(check("ftp://example.com/"), Err(Refusal::Scheme));
        assert_eq!(check("file:///etc/passwd"), Err(Refusal::Scheme));
        assert_eq!(check("http://127.0.0.1:8080/"), Err(Refusal::Address("loopback")));
        assert_eq!(check("http://2130706433/"), Err(Refusal::Address("loopback")));
        assert_eq!(
            check("http://[::ffff:127.0.0.1]/"),
            Err(Refusal::Address("loopback"))
        );
        assert_eq!(check("https://[::1]/"), Err(Refusal::Address("loopback")));
        assert!(check("https://8.8.8.8/").is_ok());
        assert!(check("https://example.com/").is_ok());
    }

    #[tokio::test]
    async fn save_time_checks_resolve_names() {
        let strict = EgressPolicy::strict();
        assert_eq!(
            strict.check_url("http://localhost:9/").await,
            Err(Refusal::Resolved)
        );
        assert_eq!(strict.check_url("not a url").await, Err(Refusal::NotAUrl));
        // A user name is not a host: the address after it is the one judged.
        assert_eq!(
            strict.check_url("http://8.8.8.8@127.0.0.1/").await,
            Err(Refusal::Address("loopback"))
        );
        let named = EgressPolicy::parse("localhost").unwrap();
        assert!(named.check_url("http://localhost:9/").await.is_ok());
    }

    #[test]
    fn remote_reasons_are_shortened_to_a_safe_form() {
        assert_eq!(
            short_reason("Bad Request: chat not found"),
            "Bad Request: chat not found"
        );
        assert_eq!(short_reason("a\nb\u{0}c\u{202e}d"), "a b c d");
        let long = short_reason(&"x".repeat(500));
        assert_eq!(long, format!("{}…", "x".repeat(80)));
        assert_eq!(slack_code("channel_not_found"), "channel_not_found");
        assert_eq!(slack_code("<html>secret</html>"), "unrecognised_error");
        assert_eq!(slack_code(&"a".repeat(65)), "unrecognised_error");
    }
}
