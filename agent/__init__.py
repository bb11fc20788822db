"""The agent daemon that runs on every webserver host.

It hosts the overlay node, the per-job roles (worker, forwarder, master), the job API job
classes are written against, log inputs, the ELF QL query language, the HTTP API and the
``elf`` command-line interface.
"""
