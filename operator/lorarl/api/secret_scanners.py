"""Token shapes and credential words of two maintained secret scanners, vendored: the credential
screen (``lorarl/api/types.py``, docs/security.md "The credential screen") is built from them
instead of a word list of our own.

gitleaks (https://github.com/gitleaks/gitleaks), MIT licence (below), at commit
b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b (v8.30.1-27-gb58d3f10, 2026-07-22):

* ``GITLEAKS_RULES``: the ``regex`` of every rule of ``config/gitleaks.toml`` that finds a token by
  its own shape (a fixed prefix or format), copied verbatim, in the file's order. Left out: the
  rules that need a keyword context on the same line (``utils.GenerateSemiGenericRegex``: the
  operator ``(?:=|>|:{1,3}=|...)`` in their regex, e.g. ``generic-api-key``, ``adafruit-api-key``),
  which cannot judge one command-line word; the multi-line or file-format rules (``private-key``,
  ``curl-auth-header``, ``curl-auth-user``, ``kubernetes-secret-yaml``, ``nuget-config-password``,
  ``freemius-secret-key``, ``sidekiq-secret``, ``sidekiq-sensitive-url``, ``pkcs12-file``); ``jwt-base64``
  (named groups, which CEL's RE2 takes but are of no use here); and ``azure-ad-client-secret``, whose
  tokens hold ``~``, a character no screened field admits.
* ``GITLEAKS_GENERIC_KEYWORDS``: the keywords of ``generic-api-key``
  (``cmd/generate/config/rules/generic.go``, ``GenericCredential``).

detect-secrets (https://github.com/Yelp/detect-secrets), Apache License 2.0
(http://www.apache.org/licenses/LICENSE-2.0; the full text is in that repository's LICENSE file), at
commit 5e141933554a0b74e7341841f318be21e895339c (v1.5.0-50-g5e14193, 2026-04-02):

* ``DETECT_SECRETS_KEYWORD_DENYLIST``: ``DENYLIST`` of ``detect_secrets/plugins/keyword.py`` (which
  that file credits in part to PyCQA/bandit, Copyright (c) 2014 Hewlett-Packard Development
  Company, L.P., MIT);
* ``DETECT_SECRETS_AWS_KEYWORDS`` and ``DETECT_SECRETS_AWS_ACCESS_KEY_SHAPE``: from
  ``detect_secrets/plugins/aws.py`` (``AWSKeyDetector.secret_keyword``, and the 40-character group
  of its second ``denylist`` pattern: an AWS secret access key).

Only the strings are copied; how they are combined and anchored is ours (``token_core``,
``lorarl/api/types.py``). tests/security/test_credential_screen.py checks the screen against the
scanners' own positive samples.

gitleaks' licence:

    MIT License

    Copyright (c) 2019 Zachary Rice

    Permission is hereby granted, free of charge, to any person obtaining a copy
    of this software and associated documentation files (the "Software"), to deal
    in the Software without restriction, including without limitation the rights
    to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
    copies of the Software, and to permit persons to whom the Software is
    furnished to do so, subject to the following conditions:

    The above copyright notice and this permission notice shall be included in all
    copies or substantial portions of the Software.

    THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
    IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
    FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
    AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
    LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
    OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
    SOFTWARE.
"""

from __future__ import annotations

GITLEAKS_COMMIT = "b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b"
DETECT_SECRETS_COMMIT = "5e141933554a0b74e7341841f318be21e895339c"

# fmt: off
# config/gitleaks.toml: (rule id, regex), verbatim
GITLEAKS_RULES: tuple[tuple[str, str], ...] = (
    ('1password-secret-key', r'''\bA3-[A-Z0-9]{6}-(?:(?:[A-Z0-9]{11})|(?:[A-Z0-9]{6}-[A-Z0-9]{5}))-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}\b'''),
    ('1password-service-account-token', r'''ops_eyJ[a-zA-Z0-9+/]{250,}={0,3}'''),
    ('adobe-client-secret', r'''\b(p8e-(?i)[a-z0-9]{32})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('age-secret-key', r'''AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}'''),
    ('airtable-personnal-access-token', r'''\b(pat[[:alnum:]]{14}\.[a-f0-9]{64})\b'''),
    ('alibaba-access-key-id', r'''\b(LTAI(?i)[a-z0-9]{20})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('anthropic-admin-api-key', r'''\b(sk-ant-admin01-[a-zA-Z0-9_\-]{93}AA)(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('anthropic-api-key', r'''\b(sk-ant-api03-[a-zA-Z0-9_\-]{93}AA)(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('artifactory-api-key', r'''\bAKCp[A-Za-z0-9]{69}\b'''),
    ('artifactory-reference-token', r'''\bcmVmd[A-Za-z0-9]{59}\b'''),
    ('authress-service-client-access-key', r'''\b((?:sc|ext|scauth|authress)_(?i)[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.(?-i:acc)[_-][a-z0-9-]{10,32}\.[a-z0-9+/_=-]{30,120})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('aws-access-token', r'''\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})\b'''),
    ('aws-amazon-bedrock-api-key-long-lived', r'''\b(ABSK[A-Za-z0-9+/]{109,269}={0,2})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('aws-amazon-bedrock-api-key-short-lived', r'''bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t'''),
    ('clickhouse-cloud-api-secret-key', r'''\b(4b1d[A-Za-z0-9]{38})\b'''),
    ('clojars-api-token', r'''(?i)CLOJARS_[a-z0-9]{60}'''),
    ('cloudflare-origin-ca-key', r'''\b(v1\.0-[a-f0-9]{24}-[a-f0-9]{146})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('databricks-api-token', r'''\b(dapi[a-f0-9]{32}(?:-\d)?)(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('digitalocean-access-token', r'''\b(doo_v1_[a-f0-9]{64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('digitalocean-pat', r'''\b(dop_v1_[a-f0-9]{64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('digitalocean-refresh-token', r'''(?i)\b(dor_v1_[a-f0-9]{64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('doppler-api-token', r'''dp\.pt\.(?i)[a-z0-9]{43}'''),
    ('duffel-api-token', r'''duffel_(?:test|live)_(?i)[a-z0-9_\-=]{43}'''),
    ('dynatrace-api-token', r'''dt0c01\.(?i)[a-z0-9]{24}\.[a-z0-9]{64}'''),
    ('easypost-api-token', r'''\bEZAK(?i)[a-z0-9]{54}\b'''),
    ('easypost-test-api-token', r'''\bEZTK(?i)[a-z0-9]{54}\b'''),
    ('facebook-access-token', r'''(?i)\b(\d{15,16}(\||%)[0-9a-z\-_]{27,40})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('facebook-page-access-token', r'''\b(EAA[MC](?i)[a-z0-9]{100,})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('flutterwave-encryption-key', r'''FLWSECK_TEST-(?i)[a-h0-9]{12}'''),
    ('flutterwave-public-key', r'''FLWPUBK_TEST-(?i)[a-h0-9]{32}-X'''),
    ('flutterwave-secret-key', r'''FLWSECK_TEST-(?i)[a-h0-9]{32}-X'''),
    ('flyio-access-token', r'''\b((?:fo1_[\w-]{43}|fm1[ar]_[a-zA-Z0-9+\/]{100,}={0,3}|fm2_[a-zA-Z0-9+\/]{100,}={0,3}))(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('frameio-api-token', r'''fio-u-(?i)[a-z0-9\-_=]{64}'''),
    ('gcp-api-key', r'''\b(AIza[\w-]{35})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('github-app-token', r'''(?:ghu|ghs)_[0-9a-zA-Z]{36}'''),
    ('github-fine-grained-pat', r'''github_pat_\w{82}'''),
    ('github-oauth', r'''gho_[0-9a-zA-Z]{36}'''),
    ('github-pat', r'''ghp_[0-9a-zA-Z]{36}'''),
    ('github-refresh-token', r'''ghr_[0-9a-zA-Z]{36}'''),
    ('gitlab-cicd-job-token', r'''glcbt-[0-9a-zA-Z]{1,5}_[0-9a-zA-Z_-]{20}'''),
    ('gitlab-deploy-token', r'''gldt-[0-9a-zA-Z_\-]{20}'''),
    ('gitlab-feature-flag-client-token', r'''glffct-[0-9a-zA-Z_\-]{20}'''),
    ('gitlab-feed-token', r'''glft-[0-9a-zA-Z_\-]{20}'''),
    ('gitlab-incoming-mail-token', r'''glimt-[0-9a-zA-Z_\-]{25}'''),
    ('gitlab-kubernetes-agent-token', r'''glagent-[0-9a-zA-Z_\-]{50}'''),
    ('gitlab-oauth-app-secret', r'''gloas-[0-9a-zA-Z_\-]{64}'''),
    ('gitlab-pat', r'''glpat-[\w-]{20}'''),
    ('gitlab-pat-routable', r'''\bglpat-[0-9a-zA-Z_-]{27,300}\.[0-9a-z]{2}[0-9a-z]{7}\b'''),
    ('gitlab-ptt', r'''glptt-[0-9a-f]{40}'''),
    ('gitlab-rrt', r'''GR1348941[\w-]{20}'''),
    ('gitlab-runner-authentication-token', r'''glrt-[0-9a-zA-Z_\-]{20}'''),
    ('gitlab-runner-authentication-token-routable', r'''\bglrt-t\d_[0-9a-zA-Z_\-]{27,300}\.[0-9a-z]{2}[0-9a-z]{7}\b'''),
    ('gitlab-scim-token', r'''glsoat-[0-9a-zA-Z_\-]{20}'''),
    ('gitlab-session-cookie', r'''_gitlab_session=[0-9a-z]{32}'''),
    ('grafana-api-key', r'''(?i)\b(eyJrIjoi[A-Za-z0-9]{70,400}={0,3})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('grafana-cloud-api-token', r'''(?i)\b(glc_[A-Za-z0-9+/]{32,400}={0,3})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('grafana-service-account-token', r'''(?i)\b(glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('harness-api-key', r'''(?:pat|sat)\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9]{24}\.[a-zA-Z0-9]{20}'''),
    ('hashicorp-tf-api-token', r'''(?i)[a-z0-9]{14}\.(?-i:atlasv1)\.[a-z0-9\-_=]{60,70}'''),
    ('heroku-api-key-v2', r'''\b((HRKU-AA[0-9a-zA-Z_-]{58}))(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('huggingface-access-token', r'''\b(hf_(?i:[a-z]{34}))(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('huggingface-organization-api-token', r'''\b(api_org_(?i:[a-z]{34}))(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('infracost-api-token', r'''\b(ico-[a-zA-Z0-9]{32})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('intra42-client-secret', r'''\b(s-s4t2(?:ud|af)-(?i)[abcdef0123456789]{64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('jwt', r'''\b(ey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9\/\\_-]{17,}\.(?:[a-zA-Z0-9\/\\_-]{10,}={0,2})?)(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('linear-api-key', r'''lin_api_(?i)[a-z0-9]{40}'''),
    ('maxmind-license-key', r'''\b([A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk)(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('microsoft-teams-webhook', r'''https://[a-z0-9]+\.webhook\.office\.com/webhookb2/[a-z0-9]{8}-([a-z0-9]{4}-){3}[a-z0-9]{12}@[a-z0-9]{8}-([a-z0-9]{4}-){3}[a-z0-9]{12}/IncomingWebhook/[a-z0-9]{32}/[a-z0-9]{8}-([a-z0-9]{4}-){3}[a-z0-9]{12}'''),
    ('notion-api-token', r'''\b(ntn_[0-9]{11}[A-Za-z0-9]{32}[A-Za-z0-9]{3})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('npm-access-token', r'''(?i)\b(npm_[a-z0-9]{36})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('octopus-deploy-api-key', r'''\b(API-[A-Z0-9]{26})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('openai-api-key', r'''\b(sk-(?:proj|svcacct|admin)-(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})T3BlbkFJ(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})\b|sk-[a-zA-Z0-9]{20}T3BlbkFJ[a-zA-Z0-9]{20})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('openshift-user-token', r'''\b(sha256~[\w-]{43})(?:[^\w-]|\z)'''),
    ('perplexity-api-key', r'''\b(pplx-[a-zA-Z0-9]{48})(?:[\x60'"\s;]|\\[nr]|$|\b)'''),
    ('planetscale-api-token', r'''\b(pscale_tkn_(?i)[\w=\.-]{32,64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('planetscale-oauth-token', r'''\b(pscale_oauth_[\w=\.-]{32,64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('planetscale-password', r'''(?i)\b(pscale_pw_(?i)[\w=\.-]{32,64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('postman-api-token', r'''\b(PMAK-(?i)[a-f0-9]{24}\-[a-f0-9]{34})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('prefect-api-token', r'''\b(pnu_[a-zA-Z0-9]{36})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('pulumi-api-token', r'''\b(pul-[a-f0-9]{40})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('pypi-upload-token', r'''pypi-AgEIcHlwaS5vcmc[\w-]{50,1000}'''),
    ('readme-api-token', r'''\b(rdme_[a-z0-9]{70})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('rubygems-api-token', r'''\b(rubygems_[a-f0-9]{48})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('scalingo-api-token', r'''\b(tk-us-[\w-]{48})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('sendgrid-api-token', r'''\b(SG\.(?i)[a-z0-9=_\-\.]{66})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('sendinblue-api-token', r'''\b(xkeysib-[a-f0-9]{64}\-(?i)[a-z0-9]{16})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('sentry-org-token', r'''\bsntrys_eyJpYXQiO[a-zA-Z0-9+/]{10,200}(?:LCJyZWdpb25fdXJs|InJlZ2lvbl91cmwi|cmVnaW9uX3VybCI6)[a-zA-Z0-9+/]{10,200}={0,2}_[a-zA-Z0-9+/]{43}(?:[^a-zA-Z0-9+/]|\z)'''),
    ('sentry-user-token', r'''\b(sntryu_[a-f0-9]{64})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('settlemint-application-access-token', r'''\b(sm_aat_[a-zA-Z0-9]{16})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('settlemint-personal-access-token', r'''\b(sm_pat_[a-zA-Z0-9]{16})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('settlemint-service-access-token', r'''\b(sm_sat_[a-zA-Z0-9]{16})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('shippo-api-token', r'''\b(shippo_(?:live|test)_[a-fA-F0-9]{40})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('shopify-access-token', r'''shpat_[a-fA-F0-9]{32}'''),
    ('shopify-custom-access-token', r'''shpca_[a-fA-F0-9]{32}'''),
    ('shopify-private-app-access-token', r'''shppa_[a-fA-F0-9]{32}'''),
    ('shopify-shared-secret', r'''shpss_[a-fA-F0-9]{32}'''),
    ('slack-app-token', r'''(?i)xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+'''),
    ('slack-bot-token', r'''xoxb-[0-9]{10,13}-[0-9]{10,13}[a-zA-Z0-9-]*'''),
    ('slack-config-access-token', r'''(?i)xoxe.xox[bp]-\d-[A-Z0-9]{163,166}'''),
    ('slack-config-refresh-token', r'''(?i)xoxe-\d-[A-Z0-9]{146}'''),
    ('slack-legacy-bot-token', r'''xoxb-[0-9]{8,14}-[a-zA-Z0-9]{18,26}'''),
    ('slack-legacy-token', r'''xox[os]-\d+-\d+-\d+-[a-fA-F\d]+'''),
    ('slack-legacy-workspace-token', r'''xox[ar]-(?:\d-)?[0-9a-zA-Z]{8,48}'''),
    ('slack-user-token', r'''xox[pe](?:-[0-9]{10,13}){3}-[a-zA-Z0-9-]{28,34}'''),
    ('slack-webhook-url', r'''(?:https?://)?hooks.slack.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}'''),
    ('sourcegraph-access-token', r'''(?i)\b(\b(sgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}|sgp_[a-fA-F0-9]{40}|[a-fA-F0-9]{40})\b)(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('square-access-token', r'''\b((?:EAAA|sq0atp-)[\w-]{22,60})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('stripe-access-token', r'''\b((?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,99})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('twilio-api-key', r'''SK[0-9a-fA-F]{32}'''),
    ('vault-batch-token', r'''\b(hvb\.[\w-]{138,300})(?:[\x60'"\s;]|\\[nr]|$)'''),
    ('vault-service-token', r'''\b((?:hvs\.[\w-]{90,120}|s\.(?i:[a-z0-9]{24})))(?:[\x60'"\s;]|\\[nr]|$)'''),
)

# cmd/generate/config/rules/generic.go GenericCredential: the keywords of generic-api-key
GITLEAKS_GENERIC_KEYWORDS = ("access", "auth", "(?-i:[Aa]pi|API)", "credential", "creds", "key", "passw(?:or)?d", "secret", "token")

# detect_secrets/plugins/keyword.py
DETECT_SECRETS_KEYWORD_DENYLIST = (
    'api_?key',
    'auth_?key',
    'service_?key',
    'account_?key',
    'db_?key',
    'database_?key',
    'priv_?key',
    'private_?key',
    'client_?key',
    'db_?pass',
    'database_?pass',
    'key_?pass',
    'password',
    'passwd',
    'pwd',
    'secret',
    'contraseña',
    'contrasena',
)

# detect_secrets/plugins/aws.py AWSKeyDetector
DETECT_SECRETS_AWS_KEYWORDS = r'(?:key|pwd|pw|password|pass|token)'
DETECT_SECRETS_AWS_ACCESS_KEY_SHAPE = r'[0-9a-zA-Z/+]{40}'
# fmt: on

# ------------------------------------------------------------------ ours: one word, whole value

# the wrappers gitleaks puts around a token (cmd/generate/config/utils/generate.go: secretPrefixUnique
# "\b(", secretSuffix, and the word boundaries of hand-written rules): the screen matches a whole
# value instead (an item, or what follows '=')
_SUFFIXES = (
    r"""(?:[\x60'"\s;]|\\[nr]|$|\b)""",
    r"""(?:[\x60'"\s;]|\\[nr]|$)""",
    r"(?:[^a-zA-Z0-9+/]|\z)",
    r"(?:[^\w-]|\z)",
    r"\b",
)


def _close_flag(core: str) -> str:
    """RE2 takes a flag ``(?i)`` in the middle of an expression (to the end of its group), Python's
    re only at the start: the same meaning as a group ``(?i:...)`` closed where its group ends."""
    at = core.find("(?i)")
    if at < 0:
        return core
    depth, end = 0, len(core)
    i = at + 4
    while i < len(core):
        ch = core[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":  # a class: skip to its end (a ']' first in it is literal)
            j = i + 1
            if j < len(core) and core[j] == "^":
                j += 1
            if j < len(core) and core[j] == "]":
                j += 1
            while j < len(core) and core[j] != "]":
                j += 2 if core[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                end = i
                break
            depth -= 1
        i += 1
    return _close_flag(core[:at] + "(?i:" + core[at + 4 : end] + ")" + core[end:])


def token_core(regex: str) -> str:
    """A gitleaks rule's token, as an expression both RE2 (the API server's CEL) and Python's re
    (``lorarl validate``) read alike: the wrappers removed, a leading ``(?i)`` made a group, POSIX
    classes spelled out."""
    s = regex
    insensitive = s.startswith("(?i)")
    if insensitive:
        s = s[4:]
    for suffix in _SUFFIXES:
        if s.endswith(suffix):
            s = s[: -len(suffix)]
            break
    if s.startswith("\\b"):
        s = s[2:]
    s = _close_flag(s.replace("[[:alnum:]]", "[0-9A-Za-z]"))
    return f"(?i:{s})" if insensitive else s


def gitleaks_tokens() -> str:
    """Every vendored gitleaks token shape, as one alternation (no anchors)."""
    return "|".join(token_core(rx) for _, rx in GITLEAKS_RULES)
