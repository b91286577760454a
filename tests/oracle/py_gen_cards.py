"""Random Agent Cards over the whole A2A v1.0 schema, made and signed by the official Python SDK.

Every message and field of the v1.0 AgentCard is drawn, including what the proto allows and a
strict reader might not expect: empty strings inside lists (`examples`, `tags`, modes, scope
lists), empty lists and maps, optional strings set to "", blank optional fields, extensions
without a uri, empty parameter structs, custom bindings that are not URIs, security schemes
and OAuth flows of every kind. REQUIRED fields get values (the SDK's own builders warn without
them). Each card is built as `a2a_pb2.AgentCard`, signed with `create_agent_card_signer` and
written as the SDK serves it (`agent_card_to_dict`: v0.3 fields beside the v1.0 ones when an
interface speaks 0.x), one JSON object per line.

Usage: py_gen_cards.py --count N --seed S --key PRIVATE_JWK_FILE --kid KID
"""

import argparse
import json
import logging
import random

logging.getLogger("a2a").setLevel(logging.ERROR)

from google.protobuf import struct_pb2  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
from jwt import PyJWK  # noqa: E402

from a2a.server.request_handlers.response_helpers import agent_card_to_dict  # noqa: E402
from a2a.types import a2a_pb2 as pb  # noqa: E402
from a2a.utils.signing import create_agent_card_signer  # noqa: E402

WORDS = ["echo", "météo", "データ", "naïve", "x", "tab\there", "quote\"d", "emoji 😀", "ﬀ", "<b>"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def chance(self, p=0.5):
        return self.r.random() < p

    def text(self, empty=0.0):
        if self.chance(empty):
            return ""
        return " ".join(self.r.choice(WORDS) for _ in range(self.r.randint(1, 3)))

    def texts(self, lo, hi, empty=0.2):
        return [self.text(empty) for _ in range(self.r.randint(lo, hi))]

    def url(self):
        host = self.r.choice(["agents.example.com", "a.example.org", "api.example.net"])
        return f"https://{host}/{self.r.choice(['a2a', 'v1', 'rpc/x', ''])}"

    def mode(self):
        return self.r.choice(["text/plain", "application/json", "text", "image/*", "", "audio/wav; rate=16000"])

    def scopes(self, required=False):
        # REQUIRED (at least one entry) in the authorization-code, client-credentials and
        # device-code flows; "MAY be empty" in the implicit and password flows.
        lo = 1 if required else 0
        return {self.text(): self.text(0.3) for _ in range(self.r.randint(lo, 2))}

    def interface(self):
        binding = self.r.choice(["JSONRPC", "GRPC", "HTTP+JSON", "https://bindings.example.com/ws", "custom-binding"])
        url = self.url()
        if binding == "GRPC" and self.chance():
            url = "grpc.example.com:443"
        i = pb.AgentInterface(
            url=url,
            protocol_binding=binding,
            protocol_version=self.r.choice(["1.0", "0.3", "0.3.0", "2"]),
        )
        if self.chance(0.3):
            i.tenant = self.text(0.5)
        return i

    def scheme(self):
        s = pb.SecurityScheme()
        kind = self.r.randint(0, 4)
        if kind == 0:
            s.api_key_security_scheme.location = self.r.choice(["header", "query", "cookie"])
            s.api_key_security_scheme.name = "X-Key"
            s.api_key_security_scheme.description = self.text(0.5)
        elif kind == 1:
            s.http_auth_security_scheme.scheme = self.r.choice(["Bearer", "Basic"])
            s.http_auth_security_scheme.bearer_format = self.r.choice(["", "JWT"])
        elif kind == 2:
            o = s.oauth2_security_scheme
            if self.chance(0.3):
                o.oauth2_metadata_url = "https://id.example.com/.well-known/oauth-authorization-server"
            flow = self.r.randint(0, 4)
            if flow == 0:
                f = o.flows.authorization_code
                f.SetInParent()
                f.authorization_url = "https://id.example.com/auth"
                f.token_url = "https://id.example.com/token"
                f.pkce_required = self.chance()
                f.scopes.update(self.scopes(required=True))
            elif flow == 1:
                f = o.flows.client_credentials
                f.SetInParent()
                f.token_url = "https://id.example.com/token"
                f.scopes.update(self.scopes(required=True))
            elif flow == 2:
                f = o.flows.device_code
                f.SetInParent()
                f.device_authorization_url = "https://id.example.com/device"
                f.token_url = "https://id.example.com/token"
                f.scopes.update(self.scopes(required=True))
            elif flow == 3:
                f = o.flows.implicit
                f.SetInParent()
                if self.chance():
                    f.authorization_url = "https://id.example.com/auth"
                f.scopes.update(self.scopes())
            else:
                f = o.flows.password
                f.SetInParent()
                if self.chance():
                    f.token_url = "https://id.example.com/token"
                f.scopes.update(self.scopes())
        elif kind == 3:
            s.open_id_connect_security_scheme.open_id_connect_url = "https://id.example.com/.well-known/openid-configuration"
        else:
            s.mtls_security_scheme.SetInParent()
            s.mtls_security_scheme.description = self.text(0.5)
        return s

    def requirements(self, names):
        out = []
        for _ in range(self.r.randint(0, 2)):
            req = pb.SecurityRequirement()
            for name in self.r.sample(names, k=self.r.randint(0, len(names))) if names else []:
                req.schemes[name].list.extend(self.texts(0, 2))
            out.append(req)
        return out

    def params(self):
        s = struct_pb2.Struct()
        if self.chance():
            s.update({"a": self.text(0.3), "n": self.r.randint(0, 9), "nested": {"empty": [], "b": self.chance()}})
        return s

    def card(self, i):
        c = pb.AgentCard(
            name=f"{self.text()} {i}",
            description=self.text(),
            version=self.r.choice(["1.0.0", "2", "0.1-beta"]),
        )
        c.supported_interfaces.extend(self.interface() for _ in range(self.r.randint(1, 3)))
        if self.chance():
            c.provider.organization = self.text()
            c.provider.url = "https://example.org"
        if self.chance(0.4):
            c.documentation_url = self.r.choice(["", "https://docs.example.org"])
        if self.chance(0.4):
            c.icon_url = self.r.choice(["", "https://example.org/icon.png"])
        caps = c.capabilities
        for field in ["streaming", "push_notifications", "extended_agent_card"]:
            if self.chance():
                setattr(caps, field, self.chance())
        for _ in range(self.r.randint(0, 2)):
            e = caps.extensions.add()
            if self.chance(0.8):
                e.uri = f"https://ext.example.com/{self.r.randint(0, 99)}"
            e.description = self.text(0.5)
            e.required = self.chance()
            if self.chance():
                e.params.CopyFrom(self.params())
        names = [f"s{k}" for k in range(self.r.randint(0, 3))]
        for name in names:
            c.security_schemes[name].CopyFrom(self.scheme())
        c.security_requirements.extend(self.requirements(names))
        c.default_input_modes.extend(self.mode() for _ in range(self.r.randint(1, 2)))
        c.default_output_modes.extend(self.mode() for _ in range(self.r.randint(1, 2)))
        for k in range(self.r.randint(1, 3)):
            s = c.skills.add()
            s.id = f"skill-{k}"
            s.name = self.text()
            s.description = self.text()
            s.tags.extend(self.texts(1, 3))
            s.examples.extend(self.texts(0, 3, empty=0.3))
            s.input_modes.extend(self.mode() for _ in range(self.r.randint(0, 2)))
            s.output_modes.extend(self.mode() for _ in range(self.r.randint(0, 2)))
            s.security_requirements.extend(self.requirements(names))
        return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--key", required=True)
    ap.add_argument("--kid", required=True)
    args = ap.parse_args()
    with open(args.key) as f:
        jwk = json.load(f)
    key = PyJWK(jwk)
    signer = create_agent_card_signer(
        key,
        {"alg": jwk.get("alg", "ES256"), "kid": args.kid, "typ": "JOSE",
         "jku": "https://agents.example.com/.well-known/jwks.json"},
    )
    gen = Gen(args.seed)
    for i in range(args.count):
        card = signer(gen.card(i))
        try:
            served = agent_card_to_dict(card)
        except ValueError:
            # The SDK's v0.3 converter gives up on some cards it can sign; the SDK's server
            # would fail the same way, so take the plain v1.0 form.
            served = MessageToDict(card)
        print(json.dumps(served, ensure_ascii=False))


if __name__ == "__main__":
    main()
