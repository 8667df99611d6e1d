# The pipeline's image for Kubeflow Pipelines and Vertex AI, and (through the
# --sdk_container_image that `nmt kubeflow compile` adds for Dataflow) for Beam workers:
# TFX 1.16's image plus this package, installed into that image's own Python 3.10.
#
# Build and push from the repository root, then compile with the same tag:
#   docker build -t REGISTRY/nmt-fra-eng:TAG .
#   docker push REGISTRY/nmt-fra-eng:TAG
#   nmt kubeflow compile --image REGISTRY/nmt-fra-eng:TAG ...
ARG TFX_IMAGE=gcr.io/tfx-oss-public/tfx:1.16.0

# 1. The wheel (built once; tests/test_kubeflow_image.py checks it carries schemas/schema.pbtxt).
FROM ${TFX_IMAGE} AS wheel
COPY . /src
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels /src

# 2. The image: `python` is the interpreter the compiled spec's commands call
#    (python -m tfx.orchestration.kubeflow.v2...). The constraints are resolved for Python 3.10
#    against TFX's own image pins, so kfp, protobuf, google-cloud-aiplatform and TensorFlow stay
#    the versions the image was tested with; the image's CUDA TensorFlow is kept as it is.
FROM ${TFX_IMAGE}
# The TensorFlow settings `nmt` starts with locally (runners/tensorflow_env.py says why):
# oneDNN CPU kernels, also on CPUs where TensorFlow would not turn them on by itself; Keras 2
# as tf.keras from the start.
ENV TF_ENABLE_ONEDNN_OPTS=1
ENV TF_USE_LEGACY_KERAS=1
COPY docker/constraints-py310.txt docker/check_image.py /opt/nmt/
COPY --from=wheel /wheels /opt/nmt/wheels
RUN python -m pip install --no-cache-dir -c /opt/nmt/constraints-py310.txt \
        /opt/nmt/wheels/nmt_fra_eng-*.whl \
    && python -m pip check
# The compiled pipeline names the schema by this path (kubeflow_runner.IMAGE_SCHEMA_FILE);
# it is the packaged copy, so the two cannot differ.
RUN mkdir -p /pipeline \
    && ln -s "$(python -c 'import schemas; print(schemas.SCHEMA_FILE)')" /pipeline/schema.pbtxt
# Beam's Flink job server, for `nmt kubeflow compile --beam-runner flink` (engines/flink.py):
# Beam's FlinkRunner starts it in a task's pod from this launcher jar and submits to the
# cluster. Maven Central serves the 2.59.0 job service there (the pom says why it is 2.57.0
# on the project's own machines). Flink on Java 17 needs the module openings below.
COPY engines/flink-job-server.pom.xml /opt/nmt/flink/pom.xml
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        openjdk-17-jre-headless maven \
    && mvn -q -f /opt/nmt/flink/pom.xml -Djob.service.version=2.59.0 \
        dependency:copy-dependencies -DoutputDirectory=/opt/nmt/flink/lib \
    && python -c "import glob, os; from engines import flink; \
flink.write_launcher_jar(os.pathsep.join(sorted(glob.glob('/opt/nmt/flink/lib/*.jar'))), \
flink.IMAGE_LAUNCHER_JAR)" \
    && apt-get purge -y -qq maven && apt-get autoremove -y -qq \
    && rm -rf /root/.m2 /var/lib/apt/lists/*
ENV JDK_JAVA_OPTIONS="--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED"
# Every executor and module the compiled spec names, and tensorflow_text, import here.
RUN python /opt/nmt/check_image.py
