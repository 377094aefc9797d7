//! HTTP inbound routes on the gateway's own port: adapters that receive
//! platform calls over HTTP (Telegram webhooks, Slack's Events API) add a
//! path → handler here when they start and remove it when they stop; the
//! gateway's HTTP server asks this registry for any path it does not serve
//! itself, so it never names a platform. A path the gateway serves itself,
//! or one another adapter already holds, is refused with an error naming it.
//!
//! This file only maps paths to handlers: authentication, body limits and
//! the answer are the handler's job.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use parking_lot::RwLock;

use super::BoxFuture;

/// What a route answers.
pub type RouteResponse = Response<Full<Bytes>>;

/// A handler of one inbound path.
pub trait HttpInbound: Send + Sync {
    /// Answers one request to the route's path (any method).
    fn handle(&self, request: Request<Incoming>) -> BoxFuture<'static, RouteResponse>;
}

/// Why a route cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("HTTP path {path:?} must start with '/'")]
    Invalid { path: String },
    #[error("HTTP path {path} is one of the gateway's own routes; choose another path")]
    Reserved { path: String },
    #[error("HTTP path {path} is already served for {owner}")]
    Taken { path: String, owner: String },
}

struct Route {
    owner: String,
    handler: Arc<dyn HttpInbound>,
}

/// The routes of one gateway.
pub struct HttpRoutes {
    reserved: Vec<String>,
    routes: RwLock<BTreeMap<String, Route>>,
}

impl std::fmt::Debug for HttpRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRoutes")
            .field("paths", &self.paths())
            .finish()
    }
}

impl HttpRoutes {
    /// A registry that refuses the gateway's own paths.
    pub fn new(reserved: &[&str]) -> HttpRoutes {
        HttpRoutes {
            reserved: reserved.iter().map(|p| p.to_string()).collect(),
            routes: RwLock::new(BTreeMap::new()),
        }
    }

    /// Serves `path` with `handler` for `owner` (`telegram account default`).
    pub fn add(
        &self,
        path: &str,
        owner: &str,
        handler: Arc<dyn HttpInbound>,
    ) -> Result<(), RouteError> {
        if !path.starts_with('/') {
            return Err(RouteError::Invalid { path: path.into() });
        }
        if self.reserved.iter().any(|r| r == path) {
            return Err(RouteError::Reserved { path: path.into() });
        }
        let mut routes = self.routes.write();
        if let Some(taken) = routes.get(path).filter(|r| r.owner != owner) {
            return Err(RouteError::Taken {
                path: path.into(),
                owner: taken.owner.clone(),
            });
        }
        let owner = owner.to_string();
        routes.insert(path.to_string(), Route { owner, handler });
        Ok(())
    }

    /// Stops serving `path` (only when `owner` holds it).
    pub fn remove(&self, path: &str, owner: &str) {
        let mut routes = self.routes.write();
        if routes.get(path).is_some_and(|r| r.owner == owner) {
            routes.remove(path);
        }
    }

    /// The handler of `path`, if an adapter serves it.
    pub fn get(&self, path: &str) -> Option<Arc<dyn HttpInbound>> {
        let routes = self.routes.read();
        routes.get(path).map(|r| Arc::clone(&r.handler))
    }

    /// Served paths, sorted.
    pub fn paths(&self) -> Vec<String> {
        let routes = self.routes.read();
        routes.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    impl HttpInbound for Nothing {
        fn handle(&self, _request: Request<Incoming>) -> BoxFuture<'static, RouteResponse> {
            Box::pin(async { Response::new(Full::new(Bytes::new())) })
        }
    }

    #[test]
    fn gateway_paths_and_taken_paths_are_refused_by_name() {
        let routes = HttpRoutes::new(&["/health", "/tools/invoke"]);
        assert_eq!(
            routes.add("/health", "telegram account a", Arc::new(Nothing)),
            Err(RouteError::Reserved {
                path: "/health".into()
            })
        );
        assert!(routes
            .add("/hook", "telegram account a", Arc::new(Nothing))
            .is_ok());
        let clash = routes
            .add("/hook", "slack account b", Arc::new(Nothing))
            .expect_err("taken");
        assert_eq!(
            clash.to_string(),
            "HTTP path /hook is already served for telegram account a"
        );
        assert!(routes.add("hook", "x", Arc::new(Nothing)).is_err());
    }

    #[test]
    fn a_route_goes_only_when_its_owner_removes_it() {
        let routes = HttpRoutes::new(&[]);
        routes
            .add("/hook", "telegram account a", Arc::new(Nothing))
            .expect("added");
        routes.remove("/hook", "slack account b");
        assert!(routes.get("/hook").is_some());
        routes.remove("/hook", "telegram account a");
        assert!(routes.get("/hook").is_none());
        assert!(routes.paths().is_empty());
    }
}
