PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO alembic_version VALUES('0002');
CREATE TABLE tokens (
	id INTEGER NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	tenant VARCHAR(128) NOT NULL, 
	admin BOOLEAN NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (token_hash)
);
INSERT INTO tokens VALUES(1,'a1df2510d1201992810917d219d2627fd6bee5a49e1bbed065d14a1b1a17feae','admin',1,1795948455.0175528526);
CREATE TABLE jobs (
	id VARCHAR(32) NOT NULL, 
	seq BIGINT NOT NULL, 
	tenant VARCHAR(128) NOT NULL, 
	name VARCHAR(128) NOT NULL, 
	image VARCHAR(256) NOT NULL, 
	command JSON NOT NULL, 
	tasks JSON NOT NULL, 
	slo_s FLOAT, 
	importance FLOAT NOT NULL, 
	max_retries INTEGER NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	reason TEXT, 
	reason_code VARCHAR(32), 
	wait_rounds INTEGER NOT NULL, 
	attempts INTEGER NOT NULL, 
	exit_code INTEGER, 
	slice_id VARCHAR(32), 
	submitted_at FLOAT NOT NULL, 
	updated_at FLOAT NOT NULL, 
	idempotency_key VARCHAR(256), 
	request_hash VARCHAR(64), 
	PRIMARY KEY (id), 
	CONSTRAINT uq_jobs_tenant_idem UNIQUE (tenant, idempotency_key)
);
INSERT INTO jobs VALUES('j-889fe1710394',1795948467212317348,'admin','hello','rodinia/nw','["sh", "-c", "echo hi-from-older"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 1, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'completed',NULL,NULL,0,1,0,'s-12a69e8f6e7a',1795948467.2122857571,1795948469.3987054825,NULL,'2180387433b4a7fbfa7852098822a5b9166094d5486b5f9bc7560129acd9ee94');
INSERT INTO jobs VALUES('j-02867f560239',1795948467906049099,'admin','long','unknown','["sh", "-c", "sleep 600"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 1, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'running',NULL,NULL,0,1,NULL,'s-985e9d23f137',1795948467.9060208797,1795948470.0929567814,NULL,'8a3625b06b51dd2535195fc790b0a93169f6a12970081dee83a5b26f4c59abbc');
INSERT INTO jobs VALUES('j-7c090632f0ba',1795948468595051253,'admin','q1','unknown','["sh", "-c", "sleep 20"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'running',NULL,NULL,0,1,NULL,'s-38814ab0943d',1795948468.5950241088,1795948470.606144905,NULL,'7486291c2df2a0610aa1e357c994a6960b62cecfdd407972753c9b8a9d330788');
INSERT INTO jobs VALUES('j-67e316365456',1795948469281409369,'admin','q2','unknown','["sh", "-c", "sleep 20"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'running',NULL,NULL,1,1,NULL,'s-e942c8395344',1795948469.2813754081,1795948472.157292366,NULL,'24cde9042f18a438d56ac3c76c7539e1f27140bae57e462586bc11675758dbf1');
INSERT INTO jobs VALUES('j-4509f2967d35',1795948469976120026,'admin','q3','unknown','["sh", "-c", "sleep 20"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'queued','needs 2 gpu; 0 free, 0 left after the jobs ahead of it in the queue','no-devices',21,0,NULL,NULL,1795948469.9760937691,1795948489.5258219241,NULL,'11067915c8ea094820798f81927694d8aef6e5abf679087506cbc7a944aae846');
INSERT INTO jobs VALUES('j-3cf92d03927b',1795948470687733927,'admin','q4','unknown','["sh", "-c", "sleep 20"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'queued','needs 2 gpu; 0 free, 0 left after the jobs ahead of it in the queue','no-devices',20,0,NULL,NULL,1795948470.6877052784,1795948489.5258219241,NULL,'c88d677c03992a34a7d047d031e7598a8d8ba120ade6df5e1ff3613024f2ec8e');
INSERT INTO jobs VALUES('j-6d9b90370def',1795948471382494705,'admin','q5','unknown','["sh", "-c", "sleep 20"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'queued','needs 2 gpu; 0 free, 0 left after the jobs ahead of it in the queue','no-devices',19,0,NULL,NULL,1795948471.3824698924,1795948489.5258219241,NULL,'02973cb1fc9bec870acaf810eb711db5cd7c4137eb82ec346b5a2324cc0738dc');
INSERT INTO jobs VALUES('j-cffa03ab06b2',1795948472082494657,'admin','q6','unknown','["sh", "-c", "sleep 20"]','{"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2, "nvme": 0, "fpga": 0, "memory": 0, "gpu_model": null, "nvme_model": null, "fpga_model": null, "memory_model": null}',NULL,1.0,2,'queued','needs 2 gpu; 0 free, 0 left after the jobs ahead of it in the queue','no-devices',18,0,NULL,NULL,1795948472.082465887,1795948489.5258219241,NULL,'06d7cff0b33b4f0a3f7ff01526d18b8de353cbdd445a63bccc73975c27019914');
CREATE TABLE slices (
	id VARCHAR(32) NOT NULL, 
	job_id VARCHAR(32) NOT NULL, 
	attempt INTEGER NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	outcome VARCHAR(16), 
	detail TEXT, 
	placement JSON NOT NULL, 
	handle VARCHAR(128), 
	created_at FLOAT NOT NULL, 
	updated_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(job_id) REFERENCES jobs (id)
);
INSERT INTO slices VALUES('s-12a69e8f6e7a','j-889fe1710394',1,'done','completed','exit code 0','{"machines": [{"name": "s-12a69e8f6e7a-m0", "host": "node2", "task": "j-889fe1710394/0", "cpus": 1.0, "memory_gb": 1.0, "devices": ["iobox0/gpu4"], "remote": ["iobox0/gpu4"]}], "tasks": [{"task": "j-889fe1710394/0", "machine": "node2", "cpus": 1.0, "memory_gb": 1.0, "devices": [{"id": "iobox0/gpu4", "kind": "gpu", "remote": true, "location": "iobox0", "path": ["up:node2", "up:iobox0"], "network_gbps": 1.7}]}]}','s-12a69e8f6e7a',1795948467.3567302227,1795948470.0129039287);
INSERT INTO slices VALUES('s-985e9d23f137','j-02867f560239',1,'running',NULL,NULL,'{"machines": [{"name": "s-985e9d23f137-m0", "host": "node0", "task": "j-02867f560239/0", "cpus": 1.0, "memory_gb": 1.0, "devices": ["iobox0/gpu3"], "remote": ["iobox0/gpu3"]}], "tasks": [{"task": "j-02867f560239/0", "machine": "node0", "cpus": 1.0, "memory_gb": 1.0, "devices": [{"id": "iobox0/gpu3", "kind": "gpu", "remote": true, "location": "iobox0", "path": ["up:node0", "up:iobox0"], "network_gbps": 1.0}]}]}','s-985e9d23f137',1795948468.1288647651,1795948470.0929567814);
INSERT INTO slices VALUES('s-38814ab0943d','j-7c090632f0ba',1,'running',NULL,NULL,'{"machines": [{"name": "s-38814ab0943d-m0", "host": "node1", "task": "j-7c090632f0ba/0", "cpus": 1.0, "memory_gb": 1.0, "devices": ["iobox0/gpu2", "iobox0/gpu1"], "remote": ["iobox0/gpu2", "iobox0/gpu1"]}], "tasks": [{"task": "j-7c090632f0ba/0", "machine": "node1", "cpus": 1.0, "memory_gb": 1.0, "devices": [{"id": "iobox0/gpu2", "kind": "gpu", "remote": true, "location": "iobox0", "path": ["up:node1", "up:iobox0"], "network_gbps": 1.0}, {"id": "iobox0/gpu1", "kind": "gpu", "remote": true, "location": "iobox0", "path": ["up:node1", "up:iobox0"], "network_gbps": 1.0}]}]}','s-38814ab0943d',1795948468.6399004459,1795948470.606144905);
INSERT INTO slices VALUES('s-e942c8395344','j-67e316365456',1,'running',NULL,NULL,'{"machines": [{"name": "s-e942c8395344-m0", "host": "node2", "task": "j-67e316365456/0", "cpus": 1.0, "memory_gb": 1.0, "devices": ["iobox0/gpu0", "iobox0/gpu4"], "remote": ["iobox0/gpu0", "iobox0/gpu4"]}], "tasks": [{"task": "j-67e316365456/0", "machine": "node2", "cpus": 1.0, "memory_gb": 1.0, "devices": [{"id": "iobox0/gpu0", "kind": "gpu", "remote": true, "location": "iobox0", "path": ["up:node2", "up:iobox0"], "network_gbps": 1.0}, {"id": "iobox0/gpu4", "kind": "gpu", "remote": true, "location": "iobox0", "path": ["up:node2", "up:iobox0"], "network_gbps": 1.0}]}]}','s-e942c8395344',1795948470.1863424778,1795948472.157292366);
CREATE TABLE slice_steps (
	id INTEGER NOT NULL, 
	slice_id VARCHAR(32) NOT NULL, 
	op VARCHAR(32) NOT NULL, 
	target VARCHAR(256) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	tries INTEGER NOT NULL, 
	started_at FLOAT, 
	ended_at FLOAT, 
	error TEXT, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_steps_slice_op_target UNIQUE (slice_id, op, target), 
	FOREIGN KEY(slice_id) REFERENCES slices (id)
);
INSERT INTO slice_steps VALUES(1,'s-12a69e8f6e7a','attach-device','iobox0/gpu4','done',1,1795948467.3659901619,1795948467.5682361125,NULL);
INSERT INTO slice_steps VALUES(2,'s-12a69e8f6e7a','launch-machine','s-12a69e8f6e7a-m0','done',1,1795948467.5759990214,1795948469.0805809498,NULL);
INSERT INTO slice_steps VALUES(3,'s-985e9d23f137','attach-device','iobox0/gpu3','done',1,1795948468.1339056491,1795948468.3351283073,NULL);
INSERT INTO slice_steps VALUES(4,'s-985e9d23f137','launch-machine','s-985e9d23f137-m0','done',1,1795948468.3355784415,1795948469.8368537425,NULL);
INSERT INTO slice_steps VALUES(5,'s-38814ab0943d','attach-device','iobox0/gpu2','done',1,1795948468.6454112529,1795948468.8479139804,NULL);
INSERT INTO slice_steps VALUES(6,'s-38814ab0943d','attach-device','iobox0/gpu1','done',1,1795948468.6457951068,1795948468.8470356463,NULL);
INSERT INTO slice_steps VALUES(7,'s-38814ab0943d','launch-machine','s-38814ab0943d-m0','done',1,1795948468.8485088348,1795948470.3523204326,NULL);
INSERT INTO slice_steps VALUES(8,'s-12a69e8f6e7a','prepare-task','j-889fe1710394','done',1,1795948469.081176281,1795948469.1822791098,NULL);
INSERT INTO slice_steps VALUES(9,'s-12a69e8f6e7a','launch-task','j-889fe1710394','done',1,1795948469.1843476295,1795948469.3359320163,NULL);
INSERT INTO slice_steps VALUES(10,'s-12a69e8f6e7a','stop-task','j-889fe1710394','done',1,1795948469.4085240363,1795948469.4089894295,NULL);
INSERT INTO slice_steps VALUES(11,'s-12a69e8f6e7a','detach-device','iobox0/gpu4','done',1,1795948469.4093065262,1795948469.5101265907,NULL);
INSERT INTO slice_steps VALUES(12,'s-12a69e8f6e7a','destroy-machine','s-12a69e8f6e7a-m0','done',1,1795948469.5114097595,1795948470.0125281811,NULL);
INSERT INTO slice_steps VALUES(13,'s-985e9d23f137','prepare-task','j-02867f560239','done',1,1795948469.837649107,1795948469.9386787414,NULL);
INSERT INTO slice_steps VALUES(14,'s-985e9d23f137','launch-task','j-02867f560239','done',1,1795948469.9398562908,1795948470.0928034782,NULL);
INSERT INTO slice_steps VALUES(15,'s-e942c8395344','attach-device','iobox0/gpu0','done',1,1795948470.1930618286,1795948470.3943107128,NULL);
INSERT INTO slice_steps VALUES(16,'s-e942c8395344','attach-device','iobox0/gpu4','done',1,1795948470.194007635,1795948470.3999333381,NULL);
INSERT INTO slice_steps VALUES(17,'s-38814ab0943d','prepare-task','j-7c090632f0ba','done',1,1795948470.3528249263,1795948470.4536726474,NULL);
INSERT INTO slice_steps VALUES(18,'s-e942c8395344','launch-machine','s-e942c8395344-m0','done',1,1795948470.4004991055,1795948471.901507616,NULL);
INSERT INTO slice_steps VALUES(19,'s-38814ab0943d','launch-task','j-7c090632f0ba','done',1,1795948470.4546973704,1795948470.6059851646,NULL);
INSERT INTO slice_steps VALUES(20,'s-e942c8395344','prepare-task','j-67e316365456','done',1,1795948471.9020023346,1795948472.0031092167,NULL);
INSERT INTO slice_steps VALUES(21,'s-e942c8395344','launch-task','j-67e316365456','done',1,1795948472.0044150352,1795948472.1570546627,NULL);
CREATE TABLE machines (
	name VARCHAR(128) NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	rack VARCHAR(128) NOT NULL, 
	cpus FLOAT NOT NULL, 
	memory_gb FLOAT NOT NULL, 
	uplink_gbps FLOAT NOT NULL, 
	position INTEGER NOT NULL, 
	PRIMARY KEY (name)
);
INSERT INTO machines VALUES('node0','machine','r0',10.0,128.0,40.0,0);
INSERT INTO machines VALUES('node1','machine','r0',10.0,128.0,40.0,1);
INSERT INTO machines VALUES('node2','machine','r0',10.0,128.0,40.0,2);
INSERT INTO machines VALUES('node3','machine','r0',10.0,128.0,40.0,3);
INSERT INTO machines VALUES('iobox0','pool','r0',0.0,0.0,40.0,4);
INSERT INTO machines VALUES('iobox1','pool','r0',0.0,0.0,40.0,5);
CREATE TABLE devices (
	id VARCHAR(160) NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	model VARCHAR(64) NOT NULL, 
	location VARCHAR(128) NOT NULL, 
	"index" INTEGER NOT NULL, 
	capacity FLOAT NOT NULL, 
	health VARCHAR(16) NOT NULL, 
	drained BOOLEAN NOT NULL, 
	slice_id VARCHAR(32), 
	position INTEGER NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO devices VALUES('iobox0/gpu0','gpu','P100','iobox0',0,1.0,'healthy',0,'s-e942c8395344',0);
INSERT INTO devices VALUES('iobox0/gpu1','gpu','P100','iobox0',1,1.0,'healthy',0,'s-38814ab0943d',1);
INSERT INTO devices VALUES('iobox0/gpu2','gpu','P100','iobox0',2,1.0,'healthy',0,'s-38814ab0943d',2);
INSERT INTO devices VALUES('iobox0/gpu3','gpu','P100','iobox0',3,1.0,'healthy',0,'s-985e9d23f137',3);
INSERT INTO devices VALUES('iobox0/gpu4','gpu','P40','iobox0',4,1.0,'healthy',0,'s-e942c8395344',4);
INSERT INTO devices VALUES('iobox1/nvme0','nvme','SSD750','iobox1',0,1.0,'healthy',0,NULL,5);
INSERT INTO devices VALUES('iobox1/nvme1','nvme','SSD750','iobox1',1,1.0,'healthy',0,NULL,6);
INSERT INTO devices VALUES('iobox1/nvme2','nvme','SSD750','iobox1',2,1.0,'healthy',0,NULL,7);
INSERT INTO devices VALUES('iobox1/nvme3','nvme','SSD750','iobox1',3,1.0,'healthy',0,NULL,8);
CREATE TABLE links (
	id VARCHAR(160) NOT NULL, 
	gbps FLOAT NOT NULL, 
	up BOOLEAN NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO links VALUES('up:node0',40.0,1);
INSERT INTO links VALUES('up:node1',40.0,1);
INSERT INTO links VALUES('up:node2',40.0,1);
INSERT INTO links VALUES('up:node3',40.0,1);
INSERT INTO links VALUES('up:iobox0',40.0,1);
INSERT INTO links VALUES('up:iobox1',40.0,1);
INSERT INTO links VALUES('rack:r0',40.0,1);
CREATE TABLE events (
	id INTEGER NOT NULL, 
	at FLOAT NOT NULL, 
	subject VARCHAR(8) NOT NULL, 
	job_id VARCHAR(32) NOT NULL, 
	slice_id VARCHAR(32), 
	from_state VARCHAR(16), 
	to_state VARCHAR(16) NOT NULL, 
	why TEXT, 
	PRIMARY KEY (id)
);
INSERT INTO events VALUES(1,1795948467.2128782271,'job','j-889fe1710394',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(2,1795948467.3567302227,'slice','j-889fe1710394','s-12a69e8f6e7a',NULL,'composing','placed');
INSERT INTO events VALUES(3,1795948467.3567302227,'job','j-889fe1710394','s-12a69e8f6e7a','queued','composing','placed on slice s-12a69e8f6e7a');
INSERT INTO events VALUES(4,1795948467.9064297676,'job','j-02867f560239',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(5,1795948468.1288647651,'slice','j-02867f560239','s-985e9d23f137',NULL,'composing','placed');
INSERT INTO events VALUES(6,1795948468.1288647651,'job','j-02867f560239','s-985e9d23f137','queued','composing','placed on slice s-985e9d23f137');
INSERT INTO events VALUES(7,1795948468.595442295,'job','j-7c090632f0ba',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(8,1795948468.6399004459,'slice','j-7c090632f0ba','s-38814ab0943d',NULL,'composing','placed');
INSERT INTO events VALUES(9,1795948468.6399004459,'job','j-7c090632f0ba','s-38814ab0943d','queued','composing','placed on slice s-38814ab0943d');
INSERT INTO events VALUES(10,1795948469.2818489074,'job','j-67e316365456',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(11,1795948469.3360929489,'slice','j-889fe1710394','s-12a69e8f6e7a','composing','running','launched');
INSERT INTO events VALUES(12,1795948469.3360929489,'job','j-889fe1710394','s-12a69e8f6e7a','composing','running','launched');
INSERT INTO events VALUES(13,1795948469.3987054825,'slice','j-889fe1710394','s-12a69e8f6e7a','running','tearing-down','job completed: exit code 0');
INSERT INTO events VALUES(14,1795948469.3987054825,'job','j-889fe1710394','s-12a69e8f6e7a','running','completed','exit code 0');
INSERT INTO events VALUES(15,1795948469.976473093,'job','j-4509f2967d35',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(16,1795948470.0129039287,'slice','j-889fe1710394','s-12a69e8f6e7a','tearing-down','done','torn down');
INSERT INTO events VALUES(17,1795948470.0929567814,'slice','j-02867f560239','s-985e9d23f137','composing','running','launched');
INSERT INTO events VALUES(18,1795948470.0929567814,'job','j-02867f560239','s-985e9d23f137','composing','running','launched');
INSERT INTO events VALUES(19,1795948470.1863424778,'slice','j-67e316365456','s-e942c8395344',NULL,'composing','placed');
INSERT INTO events VALUES(20,1795948470.1863424778,'job','j-67e316365456','s-e942c8395344','queued','composing','placed on slice s-e942c8395344');
INSERT INTO events VALUES(21,1795948470.606144905,'slice','j-7c090632f0ba','s-38814ab0943d','composing','running','launched');
INSERT INTO events VALUES(22,1795948470.606144905,'job','j-7c090632f0ba','s-38814ab0943d','composing','running','launched');
INSERT INTO events VALUES(23,1795948470.6881279945,'job','j-3cf92d03927b',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(24,1795948471.3828606605,'job','j-6d9b90370def',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(25,1795948472.0828793048,'job','j-cffa03ab06b2',NULL,NULL,'queued','submitted');
INSERT INTO events VALUES(26,1795948472.157292366,'slice','j-67e316365456','s-e942c8395344','composing','running','launched');
INSERT INTO events VALUES(27,1795948472.157292366,'job','j-67e316365456','s-e942c8395344','composing','running','launched');
CREATE INDEX ix_jobs_state ON jobs (state);
CREATE INDEX ix_jobs_tenant ON jobs (tenant);
CREATE INDEX ix_jobs_seq ON jobs (seq);
CREATE INDEX ix_jobs_state_seq ON jobs (state, seq);
CREATE INDEX ix_slices_state ON slices (state);
CREATE INDEX ix_slices_job_id ON slices (job_id);
CREATE INDEX ix_slice_steps_slice_id ON slice_steps (slice_id);
CREATE INDEX ix_devices_slice_id ON devices (slice_id);
CREATE INDEX ix_events_job_id ON events (job_id, id);
COMMIT;
