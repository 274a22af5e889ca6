"""Map each top-level folder to its ``rollwire.<name>`` subpackage (metadata lives in pyproject.toml)."""

from setuptools import find_packages, setup

FOLDERS = {
    "rollwire": "rollwire",
    "rollwire.engine": "engine",
    "rollwire.proxy": "proxy",
    "rollwire.harness_adapters": "harness_adapters",
    "rollwire.mcp_servers": "mcp_servers",
    "rollwire.orchestrator": "orchestrator",
    "rollwire.trainer": "trainer",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for package, folder in FOLDERS.items():
    package_dir[package] = folder
    packages.append(package)
    for sub in find_packages(folder):
        packages.append(f"{package}.{sub}")
        package_dir[f"{package}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
