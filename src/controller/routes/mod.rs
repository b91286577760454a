//! Routes: which card or directory holds which host and path, and the objects that route
//! to them.
//!
//! Data flow: [`ownership`] loads the claims [`table`] (pure) once per leadership from what the
//! cards' and directories' status says is served, and the reconciles take and release claims
//! there; a card's route objects are built by [`routing`] (an Ingress in the operator's
//! namespace, an HTTPRoute attached to the platform's Gateways, or none) within the platform's
//! [`policy`]; [`watch`] watches the Ingresses and HTTPRoutes the operator writes and sends
//! their owners to be reconciled when someone edits or deletes one, and [`sweep`] removes the
//! routes of cards deleted while no event could tell.

pub mod ownership;
pub mod policy;
pub mod routing;
pub mod sweep;
pub mod table;
pub mod watch;
