# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's proxy settings as the operands that fetch anything get them: the values in a Secret (they may hold
credentials), the containers' environment referring to it, and whether a trusted CA bundle is to be mounted."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# (environment variable, field of the Proxy's status and of the given settings); each is set in both cases, as
# tools read either.
PROXY_FIELDS = (('HTTP_PROXY', 'httpProxy'), ('HTTPS_PROXY', 'httpsProxy'), ('NO_PROXY', 'noProxy'))
# The GPU Operator's name of the ConfigMap the cluster network operator fills with the cluster's CA bundle (the driver
# role's template mounts it in the driver container).
TRUSTED_CA_CONFIG_MAP = 'gpu-operator-trusted-ca'


def proxy_settings(cluster_proxy=None, given=None, secret_name='accelerators-gpu-proxy'):
    """Proxy settings from the cluster's Proxy object (config.openshift.io/v1, or None) and the given settings
    ({httpProxy, httpsProxy, noProxy, trustedCA}: non-empty given values win).

    Returns {'secret_data': {NAME: value} (upper and lower case names), 'env': Kubernetes env entries reading them
    from the Secret secret_name, 'trusted_ca': whether a trusted CA bundle is configured (the Proxy's
    spec.trustedCA.name, or a given PEM bundle), 'trusted_ca_bundle': the given PEM bundle or ''}.
    """
    cluster_proxy = cluster_proxy or {}
    status = cluster_proxy.get('status') or {}
    given = given or {}
    data = {}
    for name, field in PROXY_FIELDS:
        value = given.get(field) or status.get(field) or ''
        if value:
            data[name] = data[name.lower()] = value
    env = [{'name': name, 'valueFrom': {'secretKeyRef': {'name': secret_name, 'key': name}}}
           for name in sorted(data)]
    bundle = given.get('trustedCA') or ''
    from_cluster = ((cluster_proxy.get('spec') or {}).get('trustedCA') or {}).get('name')
    return {'secret_data': data, 'env': env, 'trusted_ca': bool(bundle or from_cluster), 'trusted_ca_bundle': bundle}


def proxy_configured(cluster_proxy):
    """Whether the cluster's Proxy object (or None) sets a proxy or a trusted CA bundle: only then do its values
    need reading."""
    settings = proxy_settings(cluster_proxy)
    return bool(settings['secret_data']) or settings['trusted_ca']
