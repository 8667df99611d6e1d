"""`nmt kubeflow compile|submit|schedule`: the same pipeline on Kubeflow Pipelines or Vertex AI.

`compile` writes a KFP v2 pipeline spec (YAML); `submit` and `schedule` (compiling first unless
given --package) upload it to a KFP API and start one run or a recurring run, or with
`--backend vertex` create a Vertex AI PipelineJob or its schedule.
TFX and the KFP SDK load only when a command runs, so `nmt --help` stays fast.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import tempfile
from typing import TYPE_CHECKING, Iterator

from cli.errors import CommandError, UsageError
from pipeline import config as config_lib
from pipeline.training_flags import add_training_flags, training_config

if TYPE_CHECKING:
    from kfp.pipeline_spec import pipeline_spec_pb2

    from runners import kubeflow_runner

_KFP_ENDPOINT_ENV = "KF_PIPELINES_ENDPOINT"  # kfp.Client's own variables
_KFP_UI_ENDPOINT_ENV = "KF_PIPELINES_UI_ENDPOINT"
_PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
_DEFAULT_REGION = "us-central1"
_DEFAULT_MACHINE_TYPE = "n1-standard-8"
_MEMORY_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                 "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _cpu_millicores(text: str) -> int:
    """Kubernetes CPU quantity: 8, 0.5 or 500m."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m?)", text)
    millicores = round(float(match[1]) * (1 if match[2] else 1000)) if match else 0
    if millicores <= 0:
        raise argparse.ArgumentTypeError(f"expected cores, e.g. 8, 0.5 or 500m, got {text!r}")
    return millicores


def _memory_bytes(text: str) -> int:
    """Kubernetes memory quantity: 32G, 30Gi, 512Mi..."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", text)
    size = round(float(match[1]) * _MEMORY_UNITS[match[2] or ""]) if match else 0
    if size <= 0:
        raise argparse.ArgumentTypeError(f"expected a size, e.g. 32G or 30Gi, got {text!r}")
    return size


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


def _yaml_path(text: str) -> str:
    if not text.endswith((".yaml", ".yml")):
        raise argparse.ArgumentTypeError(f"kfp.Client uploads YAML: use a .yaml name, got {text!r}")
    return text


def _add_compile_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("compiling")
    actions = [
        group.add_argument("--image", help="container image with this package (see the "
                           "Dockerfile), e.g. us-docker.pkg.dev/PROJECT/nmt/nmt-fra-eng:1"),
        group.add_argument("--data", help="fra.txt where the cluster can read it, e.g. "
                           "gs://BUCKET/fra-eng/fra.txt; its directory is the default of the "
                           "data_root runtime parameter"),
        group.add_argument("--pipeline-name", default=config_lib.PIPELINE_NAME),
        group.add_argument("--beam-runner", choices=("direct", "flink"), default="direct",
                           help="the Beam engine of the data steps: direct (default, inside "
                                "each task) or flink (a Flink 1.16 cluster at --flink-master; "
                                "docs/scaling.md)"),
        group.add_argument("--flink-master", metavar="HOST:PORT",
                           help="with --beam-runner flink: the cluster's REST address"),
        group.add_argument("--beam-arg", action="append", default=None, dest="beam_args",
                           help="Beam argument for Transform, StatisticsGen..., repeatable, e.g. "
                                "--beam-arg=--runner=DataflowRunner (default: "
                                + " ".join(config_lib.DEFAULT_BEAM_ARGS) + "; with flink "
                                "they are added to the engine's)"),
        group.add_argument("--trainer-gpus", type=_count, default=0,
                           help="GPUs for the Trainer's container (default 0)"),
        group.add_argument("--trainer-gpu-type", default=None,
                           help="accelerator type: the Kubernetes resource name on KFP "
                                "(default nvidia.com/gpu), e.g. NVIDIA_TESLA_T4 on Vertex AI"),
        group.add_argument("--trainer-cpu", type=_cpu_millicores, default=None,
                           help="CPU limit of the Trainer's container, e.g. 8 or 500m"),
        group.add_argument("--trainer-memory", type=_memory_bytes, default=None,
                           help="memory limit of the Trainer's container, e.g. 32G or 30Gi"),
        group.add_argument("--trainer-workers", type=_count, default=1,
                           help="--backend vertex: train on this many machines as a Vertex AI "
                                "custom job (MultiWorkerMirroredStrategy; needs --project); "
                                "open-source KFP runs a task as one pod (default 1)"),
        group.add_argument("--trainer-machine-type", default=None,
                           help="with --trainer-workers: each machine's type (default "
                                f"{_DEFAULT_MACHINE_TYPE}); --trainer-gpus/--trainer-gpu-type "
                                "are then per machine"),
        group.add_argument("--beam-cpu", type=_cpu_millicores, default=None,
                           help="CPU each Beam component (ExampleGen, StatisticsGen, Transform, "
                                "Evaluator) asks for: a request on KFP, the limit Vertex AI "
                                "sizes the machine by (default 2)"),
        group.add_argument("--beam-memory", type=_memory_bytes, default=None,
                           help="memory each Beam component asks for, likewise (default 8Gi)"),
    ]
    # The recipe flags of `nmt run`, with the same defaults.
    recipe = parser.add_argument_group("training (as for nmt run)")
    before = set(recipe._group_actions)
    add_training_flags(recipe)
    recipe.add_argument("--warm-start", action="store_true",
                        help="each run starts training from the newest served model's weights "
                             "when it runs, its vocabulary kept (the first: from scratch)")
    parser.set_defaults(compile_actions=actions + [a for a in recipe._group_actions
                                                   if a not in before])


def _add_backend_flags(parser: argparse.ArgumentParser) -> None:
    """Where the pipeline runs: compile and submit/schedule both need to know."""
    parser.add_argument("--backend", choices=("kfp", "vertex"), default="kfp",
                        help="kfp: open-source Kubeflow Pipelines, which cannot run TFX "
                        "resolver steps, so the Evaluator blesses on the BLEU threshold alone; "
                        "vertex: Vertex AI Pipelines, which compares with the latest blessed "
                        "model (default: kfp)")
    group = parser.add_argument_group("Vertex AI (--backend vertex)")
    group.add_argument("--project", default=os.environ.get(_PROJECT_ENV),
                       help=f"Google Cloud project (default ${_PROJECT_ENV})")
    group.add_argument("--region", default=_DEFAULT_REGION, help="default %(default)s")


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Vertex AI endpoint (--backend vertex)")
    group.add_argument("--service-account", help="run-as service account of the runs")
    group.add_argument("--api-endpoint", help="Vertex AI API address (default "
                       "REGION-aiplatform.googleapis.com)")
    group = parser.add_argument_group("KFP endpoint (kfp.Client options)")
    group.add_argument("--host", default=os.environ.get(_KFP_ENDPOINT_ENV),
                       help="KFP API address, e.g. http://localhost:8080 after `kubectl -n "
                            "kubeflow port-forward svc/ml-pipeline-ui 8080:80` "
                            f"(default ${_KFP_ENDPOINT_ENV})")
    group.add_argument("--ui-host", default=os.environ.get(_KFP_UI_ENDPOINT_ENV),
                       help=f"UI address for the printed links (default ${_KFP_UI_ENDPOINT_ENV}, "
                            "else --host)")
    group.add_argument("--namespace", help="your profile namespace on multi-user Kubeflow")
    group.add_argument("--existing-token", help="bearer token, e.g. $(gcloud auth "
                                                "print-access-token)")
    group.add_argument("--cookies", help="cookie header, e.g. authservice_session=...")
    group.add_argument("--sa-token-path", help="service-account token file (in a pod on "
                       "multi-user Kubeflow: /var/run/secrets/kubeflow/pipelines/token)")
    parser.add_argument("--experiment", default=config_lib.PIPELINE_NAME,
                        help="KFP experiment to run in, created if missing (default "
                             "%(default)s)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="runtime parameter value, repeatable, e.g. "
                             "data_root=gs://BUCKET/fra-eng-2025-06")
    parser.add_argument("--name", help="display name of the run or recurring run")
    parser.add_argument("--package", type=_yaml_path,
                        help="upload this compiled pipeline instead of compiling one")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds `kubeflow compile|submit|schedule` to the `nmt` parser."""
    kubeflow = subparsers.add_parser("kubeflow", help="compile for, run or schedule on Kubeflow "
                                     "Pipelines", description=__doc__)
    commands = kubeflow.add_subparsers(dest="kubeflow_command", required=True)

    compile_ = commands.add_parser("compile", help="write the KFP v2 pipeline spec (YAML)")
    _add_compile_flags(compile_)
    _add_backend_flags(compile_)
    compile_.add_argument("--pipeline-root", help="where runs write artifacts, e.g. "
                          "gs://BUCKET/nmt: the spec's default pipeline root (not s3:// or "
                          "minio://: TensorFlow cannot write there)")
    compile_.add_argument("--output", type=_yaml_path, default="pipeline.yaml",
                          help="the YAML to write (default ./pipeline.yaml; do not commit it)")
    compile_.set_defaults(handler=_compile)

    _add_start_parser(commands, "submit", "upload the pipeline and start one run").set_defaults(
        handler=_submit)
    schedule = _add_start_parser(commands, "schedule",
                                 "upload the pipeline and create a recurring run")
    schedule.add_argument(
        "--cron", required=True,
        help='when, as 5-field cron in the cluster\'s time zone (usually UTC), e.g. "0 3 * * *" '
             'for 03:00 daily; passed to KFP as 6-field cron with seconds ("0 0 3 * * *"), '
             'to Vertex AI as is (which also takes a "TZ=Europe/Paris " prefix)')
    schedule.set_defaults(handler=_schedule)


def _add_start_parser(commands: argparse._SubParsersAction, name: str,
                      help_text: str) -> argparse.ArgumentParser:
    """submit and schedule: compile flags (or --package), then the KFP endpoint."""
    command = commands.add_parser(name, help=help_text)
    _add_compile_flags(command)
    _add_backend_flags(command)
    command.add_argument("--pipeline-root", help="pipeline root: compiled in, or with --package "
                         "this run's override of the compiled default")
    _add_endpoint_flags(command)
    return command


def _resources(args: argparse.Namespace) -> kubeflow_runner.Resources:
    from runners import kubeflow_runner

    return kubeflow_runner.Resources(
        gpus=args.trainer_gpus, gpu_type=args.trainer_gpu_type or kubeflow_runner.DEFAULT_GPU_TYPE,
        cpu_millicores=args.trainer_cpu, memory_bytes=args.trainer_memory)


def _beam_resources(args: argparse.Namespace) -> kubeflow_runner.Resources:
    from runners import kubeflow_runner

    return kubeflow_runner.Resources(
        cpu_millicores=args.beam_cpu or kubeflow_runner.DEFAULT_BEAM_CPU_MILLICORES,
        memory_bytes=args.beam_memory or kubeflow_runner.DEFAULT_BEAM_MEMORY_BYTES,
        limit=args.backend == "vertex")


def _vertex_training(args: argparse.Namespace) -> kubeflow_runner.VertexTraining | None:
    """--trainer-workers N > 1: the Trainer as a Vertex AI custom job over N machines."""
    from runners import kubeflow_runner

    if args.trainer_workers <= 1:
        if args.trainer_machine_type:
            raise UsageError("--trainer-machine-type applies with --trainer-workers 2 or more")
        return None
    if args.backend != "vertex":
        raise UsageError("--trainer-workers needs --backend vertex: open-source KFP runs "
                         "each task as one pod and has no multi-machine task")
    if args.trainer_cpu or args.trainer_memory:
        raise UsageError("--trainer-cpu/--trainer-memory size one container; with "
                         "--trainer-workers each machine is --trainer-machine-type")
    if not args.project:
        raise UsageError(f"--trainer-workers needs --project (or ${_PROJECT_ENV}): the "
                         "custom job runs in that project")
    return kubeflow_runner.VertexTraining(
        workers=args.trainer_workers, project=args.project, region=args.region,
        machine_type=args.trainer_machine_type or _DEFAULT_MACHINE_TYPE, gpus=args.trainer_gpus,
        gpu_type=args.trainer_gpu_type or "NVIDIA_TESLA_T4")


def _beam_args(args: argparse.Namespace) -> tuple[str, ...]:
    if args.beam_runner == "flink":
        from engines import flink

        return flink.cluster_beam_args(args.flink_master) + tuple(args.beam_args or ())
    return tuple(args.beam_args or config_lib.DEFAULT_BEAM_ARGS)


def _compile_to(args: argparse.Namespace,
                output_path: str) -> pipeline_spec_pb2.PipelineSpec:
    """Compiles from the flags; returns the PipelineSpec written to output_path."""
    missing = [flag for flag, value in (("--image", args.image), ("--data", args.data),
                                        ("--pipeline-root", args.pipeline_root)) if not value]
    if missing:
        raise UsageError(f"compiling needs {', '.join(missing)}")
    if (args.beam_runner == "flink") != bool(args.flink_master):
        raise UsageError("--beam-runner flink and --flink-master go together when compiling: "
                         "a Kubeflow task has no Flink of its own.")
    _check_storage(args)
    from runners import kubeflow_runner  # heavy (TFX, TF): only when needed

    config = config_lib.PipelineConfig(
        data_path=args.data, pipeline_name=args.pipeline_name, pipeline_root=args.pipeline_root,
        schema_file=kubeflow_runner.IMAGE_SCHEMA_FILE, **training_config(args),
        beam_pipeline_args=_beam_args(args), warm_start=args.warm_start)
    vertex_training = _vertex_training(args)
    try:
        return kubeflow_runner.compile_pipeline(
            config, args.image, output_path, _resources(args), backend=args.backend,
            beam_resources=_beam_resources(args), vertex_training=vertex_training)
    except kubeflow_runner.ComponentNotFoundError as err:
        raise CommandError(str(err)) from None


def _check_storage(args: argparse.Namespace) -> None:
    """The storage flags (and a data_root --param) name paths every pod can use."""
    from runners.kfp_client import check_storage

    check_storage(("--pipeline-root", args.pipeline_root), ("--data", args.data),
                  *[("--param data_root", p.partition("=")[2]) for p in getattr(args, "param", [])
                    if p.startswith("data_root=")])


@contextlib.contextmanager
def _package_path(args: argparse.Namespace) -> Iterator[str]:
    """--package as is, or the pipeline compiled from the flags into a temporary file."""
    if args.package:
        compile_only = [action.option_strings[0] for action in args.compile_actions
                        if getattr(args, action.dest) != action.default]
        if compile_only:
            raise UsageError(f"{', '.join(compile_only)} only apply when compiling; "
                             "--package is uploaded as it was compiled")
        _check_storage(args)
        yield args.package
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pipeline.yaml")
        _compile_to(args, path)
        yield path


def _caching(spec: pipeline_spec_pb2.PipelineSpec) -> str:
    """What a run may take from the cache, in one sentence for the compile output."""
    from runners.kubeflow_runner import EXAMPLE_GEN_ID, SERVED_MODEL_ID, TRANSFORM_ID

    tasks = spec.root.dag.tasks
    uncached = {name for name, task in tasks.items()  # resolver tasks have no caching options
                if task.HasField("caching_options") and not task.caching_options.enable_cache}

    def downstream(of: set[str]) -> set[str]:
        """`of` and everything after it: each gets a new input artifact when `of` runs."""
        rerun = set(of)
        while True:
            more = {name for name, task in tasks.items() if set(task.dependent_tasks) & rerun}
            if more <= rerun:
                return rerun
            rerun |= more

    rerun = downstream(uncached)
    cached = sorted(set(tasks) - rerun)
    warm = ""
    if SERVED_MODEL_ID in uncached:
        warm_tasks = {SERVED_MODEL_ID, TRANSFORM_ID}
        trained = sorted(downstream(warm_tasks) - warm_tasks)
        warm = (f"; {SERVED_MODEL_ID} and {TRANSFORM_ID} run every time too (a warm start takes "
                f"the model served when they run, its weights and its vocabulary), so "
                f"{', '.join(trained)} run again")
    if EXAMPLE_GEN_ID not in uncached:
        return ("caching: every task may be cached; FraTxtExampleGen's cache key includes the "
                "fingerprint of fra.txt (its driver runs before the cache check), so a changed "
                "file re-runs it and everything after it" + warm)
    after = downstream({EXAMPLE_GEN_ID}) - {EXAMPLE_GEN_ID}
    return (f"caching: {EXAMPLE_GEN_ID} runs every time (open-source KFP cannot see that "
            f"fra.txt changed), so {', '.join(sorted(after))} run again on its new output"
            f"{warm}; cached when unchanged: {', '.join(cached)}")


def _compile(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    spec = _compile_to(args, args.output)
    defaults = ", ".join(f"{name}={json_format.MessageToDict(p.default_value)}"
                         for name, p in spec.root.input_definitions.parameters.items())
    print(f"Wrote {args.output}: pipeline {spec.pipeline_info.name} for {args.backend}, "
          f"image {args.image}, pipeline root {spec.default_pipeline_root}; runtime "
          f"parameters: {defaults}")
    print(f"{args.backend}: {_caching(spec)}")
    return 0


def _start_on_vertex(args: argparse.Namespace, recurring: bool) -> int:
    """submit/schedule --backend vertex: a PipelineJob, or its schedule."""
    from runners import kfp_client
    from runners import vertex_client

    if not args.project:
        raise UsageError(f"--backend vertex needs --project (or ${_PROJECT_ENV})")
    endpoint = vertex_client.VertexEndpoint(
        project=args.project, region=args.region, service_account=args.service_account,
        api_endpoint=args.api_endpoint)
    with _package_path(args) as path:
        package = kfp_client.Package.read(path)
        params = kfp_client.parameter_values(package, args.param)
        if recurring:
            created = vertex_client.schedule(endpoint, package, params, args.cron, args.name,
                                             args.pipeline_root)
        else:
            created = vertex_client.submit(endpoint, package, params, args.name,
                                           args.pipeline_root)
    what = f"Schedule (cron {args.cron!r})" if recurring else "Pipeline job"
    print(f"{what} {created.resource_name} of pipeline {package.name}: {created.link}")
    return 0


def _start(args: argparse.Namespace, recurring: bool) -> int:
    """Shared by submit and schedule: package, endpoint, parameters; then one call."""
    from runners import kfp_client

    if args.backend == "vertex":
        return _start_on_vertex(args, recurring)
    if not args.host:
        raise UsageError(f"--host is required (or set {_KFP_ENDPOINT_ENV})")
    endpoint = kfp_client.Endpoint(
        host=args.host, namespace=args.namespace, existing_token=args.existing_token,
        cookies=args.cookies, sa_token_path=args.sa_token_path, ui_host=args.ui_host)
    with _package_path(args) as path:
        package = kfp_client.Package.read(path)
        if package.has_resolvers:
            raise UsageError(f"{path} was compiled with --backend vertex: open-source KFP "
                             "cannot run its resolver steps; compile it with --backend "
                             "kfp, or submit it with --backend vertex")
        params = kfp_client.parameter_values(package, args.param)
        if recurring:
            started = kfp_client.schedule(endpoint, package, args.experiment, params,
                                          args.cron, args.name, args.pipeline_root)
        else:
            started = kfp_client.submit(endpoint, package, args.experiment, params,
                                        args.name, args.pipeline_root)
    version_link = endpoint.link(
        f"pipelines/details/{started.pipeline_id}/version/{started.version_id}")
    print(f"Uploaded pipeline {package.name}, version {started.version_id}: {version_link}")
    what = f"Recurring run (cron {kfp_client.kfp_cron(args.cron)!r})" if recurring else "Run"
    print(f"{what} {started.id} in experiment {args.experiment}: {started.link}")
    return 0


def _submit(args: argparse.Namespace) -> int:
    return _start(args, recurring=False)


def _schedule(args: argparse.Namespace) -> int:
    return _start(args, recurring=True)
