import { Module } from '@nestjs/common';
import { AppModule } from '../app.module';
import { DemoProbe } from './demo-probe';

@Module({ imports: [AppModule], providers: [DemoProbe] })
export class DemoModule {}
